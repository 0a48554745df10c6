"""`gsm8k::lm_eval` equals lm-evaluation-harness 0.4.13's `gsm8k` task, doc by doc.

The slow tests build lm-eval's ConfigurableTask from its gsm8k.yaml over the local GSM8K
test and train splits (both are in the data directory) and compare every context (the
seeded 5-shot draws included), the generation settings, and both filters' exact_match on
hand-made completions run through lm-eval's own filters and metric. The fast tests pin
the same things against hand-derived values.
"""

import dataclasses
import json
import random

import pytest

from proctor.data import load_split
from proctor.errors import UserError
from proctor.requests import Chat, GenerateResult, Generation
from proctor.tasks.config import ChatFormat
from proctor.tasks.generation import GenerationInstance
from proctor.tasks.lm_eval.gsm8k import SPEC, GSM8KLmEvalTask
from proctor.tasks.registry import resolve, task_config, task_rows

from lm_eval_tasks import lm_eval_requests, lm_eval_task

DOCS = 20


def rows(data_dir, split):
    return load_split("openai/gsm8k", "main", split, data_dir)


def task_of(num_shots=None, **changes):
    (task,) = resolve(SPEC, num_shots=num_shots)
    return type(task)(dataclasses.replace(task.config, **changes)) if changes else task


def generated(text: str) -> GenerateResult:
    return GenerateResult(samples=(Generation(text, 7, "stop"),))


# Hand-made completions, `{g}` the doc's short gold answer, with (strict-match, flexible-extract)
# exact_match as derived by hand from gsm8k.yaml for the gold 18.
COMPLETIONS = [
    ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### {g}", 1, 1),
    ("She makes {g} dollars.", 0, 1),          # no "#### ": strict falls back to [invalid]
    ("The answer is {g}.", 0, 1),              # flexible takes "18." and "\.$" drops the dot
    ("#### ${g}", 0, 1),                       # "$" is not in strict's class; "\$" is ignored
    ("#### {g}.00", 0, 0),                     # "18.00" is not "18"
    ("", 0, 0),
    ("#### {g}\nBut then 7 more", 1, 0),       # strict: the first match; flexible: the last number
    ("#### 7 #### {g}", 0, 1),
    ("####  {g}", 0, 1),                       # two spaces: strict needs a digit after "#### "
    ("#### -{g}", 0, 0),
    ("So the total is {g},.", 0, 1),           # "," then "\.$" ignored
    ("#### {g_commas}", 1, 1),                 # thousands commas are ignored on both sides
]


def fill(template: str, gold: str) -> str:
    return template.format(g=gold, g_commas=f"{int(gold):,}")


# ---- fast: the spec itself ------------------------------------------------------

def test_spec_config_and_listing(data_dir):
    config = task_config(SPEC)
    assert (config.dataset_path, config.dataset_name, config.split, config.num_shots) == \
        ("openai/gsm8k", "main", "test", 5)
    assert config.primary_metric == "exact_match_strict"
    assert isinstance(task_of(), GSM8KLmEvalTask)
    (row,) = task_rows(SPEC, data_dir)
    assert (row.items, row.items_source, row.shots, row.primary_metric) == (1319, "data", 5, "exact_match_strict")


def test_prompts_are_lm_evals_layout_with_seeded_train_draws(data_dir):
    test, train = rows(data_dir, "test"), rows(data_dir, "train")
    assert (len(test), len(train)) == (1319, 7473)
    rnd = random.Random(1234)  # one sampler per task, drawing for each doc in turn
    instances = task_of().instances(data_dir, 3)
    for doc, inst in zip(test, instances):
        shots = rnd.sample(train, 5)
        assert inst.prompt == "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots) + \
            f"Question: {doc['question']}\nAnswer:"
    first = instances[0].prompt
    assert first.startswith("Question: Jen and Tyler are gymnasts practicing flips.")
    assert first.endswith("How much in dollars does she make every day at the farmers' market?\nAnswer:")
    assert first.count("\n#### ") == 5 and instances[0].query_id == "gsm8k::lm_eval#0"
    assert instances[0].target == test[0]["answer"]      # lm-eval's doc_to_target: the whole answer


def test_generation_settings(data_dir):
    task = task_of()
    instances = task.instances(data_dir, 2)
    r = instances[0].request
    assert (r.max_gen_toks, r.stop, r.do_sample, r.temperature, r.top_p, r.repeats, r.policy) == \
        (256, ("Question:", "</s>", "<|im_end|>"), False, 0.0, 1.0, 1, "lm_eval")
    settings = task.settings(instances)
    assert (settings.max_gen_toks, settings.stop, settings.do_sample) == (256, r.stop, False)


def test_shots_override_and_errors(data_dir):
    zero = task_of(num_shots=0).instances(data_dir, 1)[0]
    five = task_of().instances(data_dir, 1)[0]
    assert zero.prompt == "Question: " + rows(data_dir, "test")[0]["question"] + "\nAnswer:"
    three = task_of(num_shots=3).instances(data_dir, 1)[0]
    assert three.prompt.count("\n#### ") == 3
    assert len({zero.request.key, three.request.key, five.request.key}) == 3
    with pytest.raises(UserError, match="9000 few-shot examples requested"):
        task_of(num_shots=9000).instances(data_dir, 1)


def test_chat_prompts(data_dir):
    multi = task_of(chat=ChatFormat(fewshot_as_multiturn=True), system_instruction="Be brief.")
    chat = multi.instances(data_dir, 1)[0].prompt
    assert isinstance(chat, Chat) and not chat.continue_final
    roles = [m.role for m in chat.messages]
    assert roles == ["system"] + ["user", "assistant"] * 5 + ["user"]
    assert chat.messages[0].content == "Be brief." and chat.messages[-1].content.startswith("Question: Janet")
    single = task_of(chat=ChatFormat(fewshot_as_multiturn=False)).instances(data_dir, 1)[0].prompt
    assert [m.role for m in single.messages] == ["user"]
    assert single.messages[0].content == task_of().instances(data_dir, 1)[0].prompt


def test_both_filters_per_doc_and_in_aggregate():
    task = task_of()
    answer = "Half of 36 is <<36/2=18>>18.\n#### 18"
    inst = GenerationInstance("q#0", SPEC, 0, 0, task.doc_request([], {"question": "?"}), answer)
    for template, strict, flexible in COMPLETIONS:
        text = fill(template, "18")
        score = task.score(inst, generated(text))
        assert score.metrics == {"exact_match_strict": strict, "exact_match_flexible": flexible}, text
        assert score.is_correct == bool(strict) and score.correct_answer == "18"
    big = GenerationInstance("q#1", SPEC, 1, 1, inst.request, "So 1000 + 234 = 1,234.\n#### 1,234")
    score = task.score(big, generated("#### 1234."))
    assert score.metrics == {"exact_match_strict": 1.0, "exact_match_flexible": 1.0}
    assert score.predicted_answer == "1234." and score.correct_answer == "1234"
    assert score.model_output[0].details == {"strict-match": "1234.", "flexible-extract": "1234."}
    results = {inst.request.key: generated("#### 18")}
    scored = task.score_docs([inst, inst], results)
    assert scored.metrics["exact_match_strict"].mean == 1.0
    assert scored.metrics["exact_match_flexible"].mean == 1.0


# ---- slow: against lm-eval's own task object -------------------------------------

@pytest.fixture(scope="module")
def lm_task(data_dir):
    return lm_eval_task("gsm8k/gsm8k.yaml", {"train": rows(data_dir, "train"), "test": rows(data_dir, "test")})


@pytest.mark.slow  # lm-eval
def test_contexts_and_generation_settings_equal_lm_eval(lm_task, data_dir):
    from lm_eval.models.huggingface import HFLM

    theirs = lm_eval_requests(lm_task, limit=DOCS)
    ours = task_of().instances(data_dir, DOCS)
    assert len(ours) == len(theirs) == DOCS
    assert lm_task.config.num_fewshot == 5 and lm_task.config.fewshot_config.sampler == "default"
    for inst, (doc, [(context, gen_kwargs)]) in zip(ours, theirs):
        assert inst.prompt == context, inst.query_id
        assert inst.target == lm_task.doc_to_target(doc)
        r = inst.request
        assert list(r.stop) == gen_kwargs["until"]
        assert (r.do_sample, r.temperature) == (gen_kwargs["do_sample"], gen_kwargs["temperature"])
        assert "max_gen_toks" not in gen_kwargs and r.max_gen_toks == HFLM.max_gen_toks.fget(None)
    assert lm_task.config.repeats == 1


@pytest.mark.slow  # lm-eval
def test_chat_contexts_equal_lm_eval(data_dir):
    def render(messages, add_generation_prompt=True):
        assert add_generation_prompt
        return json.dumps(messages)

    for multiturn in (True, False):
        lm = lm_eval_task("gsm8k/gsm8k.yaml", {"train": rows(data_dir, "train"), "test": rows(data_dir, "test")})
        lm.build_all_requests(limit=5, rank=0, world_size=1, apply_chat_template=True,
                              fewshot_as_multiturn=multiturn, chat_template=render, system_instruction="Be brief.")
        theirs = [json.loads(i.arguments[0]) for i in sorted(lm.instances, key=lambda i: i.doc_id)]
        task = task_of(chat=ChatFormat(fewshot_as_multiturn=multiturn), system_instruction="Be brief.")
        ours = [[m.to_dict() for m in i.prompt.messages] for i in task.instances(data_dir, 5)]
        assert ours == theirs, multiturn


@pytest.mark.slow  # lm-eval
def test_filters_and_exact_match_equal_lm_eval(lm_task, data_dir):
    """Every hand-made completion on the first docs through lm-eval's filter_list, take_first
    and exact_match (process_results), and through proctor's score."""
    ours = task_of().instances(data_dir, DOCS)
    task = task_of()
    values = {"strict-match": [], "flexible-extract": []}
    for template, _, _ in COMPLETIONS:
        lm_task.build_all_requests(limit=DOCS, rank=0, world_size=1)
        by_doc = {i.doc_id: i for i in lm_task.instances}
        texts = {}
        for inst in ours:
            gold = task.score(inst, generated("")).correct_answer
            texts[inst.doc_id] = fill(template, gold)
            by_doc[inst.doc_id].resps = [texts[inst.doc_id]]
        lm_task.apply_filters()
        for inst in ours:
            mine = task.score(inst, generated(texts[inst.doc_id])).metrics
            lm_inst = by_doc[inst.doc_id]
            for name, metric in (("strict-match", "exact_match_strict"), ("flexible-extract", "exact_match_flexible")):
                ref = lm_task.process_results(lm_inst.doc, [lm_inst.filtered_resps[name]])["exact_match"]
                assert mine[metric] == ref, (template, inst.doc_id, name)
                values[name].append(ref)
    aggregate = lm_task.aggregation()["exact_match"]
    assert 0 < aggregate(values["strict-match"]) < aggregate(values["flexible-extract"]) < 1
