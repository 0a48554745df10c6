"""BIG-Bench-Hard CoT: counts, and prompts/requests/scores equal to lm-eval's own task objects.

lm-eval's `bbh_cot_fewshot_<task>` YAML is loaded with lm-eval's loader and built into its
`ConfigurableTask` over our local rows (its hub dataset cannot be reached here).
"""

import json
import logging
from pathlib import Path

import pytest

from proctor.errors import UserError
from proctor.requests import GenerateResult, Generation
from proctor.tasks import bbh
from proctor.tasks.registry import leaf_specs, resolve, suite, task_config, task_rows

DOCS_PER_TASK = 3


def lm_eval_task(task: str, rows: list[dict]):
    import datasets
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    path = Path(lm_eval.__file__).parent / "tasks" / "bbh" / "cot_fewshot" / f"{task}.yaml"
    cfg = load_yaml(path)
    cfg["custom_dataset"] = lambda **_: datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    return ConfigurableTask(config=cfg)


def local_rows(data_dir, task):
    return json.loads((data_dir / "bbh" / "bbh" / f"{task}.json").read_text())["examples"]


def test_counts_from_the_real_data(data_dir):
    rows = {r.spec: r for r in task_rows("bbh", data_dir=data_dir)}
    assert rows[bbh.SUITE].items == 6511 and rows[bbh.SUITE].items_source == "data"
    for task, n in bbh.BBH_TEST.items():
        assert rows[bbh.spec_name(task)].items == n == len(local_rows(data_dir, task))
    assert {r.spec: r.items for r in task_rows("bbh")}[bbh.SUITE] == 6511   # official sizes


def test_spec_resolution():
    specs = leaf_specs("bbh:cot::lm_eval")
    assert len(specs) == 27 and specs[0] == "bbh_boolean_expressions:cot::lm_eval"
    assert suite("bbh:cot::lm_eval").primary == "micro"
    config = task_config("bbh_snarks:cot::lm_eval")
    assert (config.dataset_path, config.dataset_name, config.subject) == \
        ("SaylorTwift/bbh", "snarks", "snarks")
    assert (config.split, config.num_shots, config.primary_metric) == ("test", 3, "exact_match")
    assert len(resolve("bbh:cot::lm_eval")) == 27
    with pytest.raises(UserError, match="did you mean 'bbh_snarks:cot::lm_eval'"):
        resolve("bbh_snark:cot::lm_eval")


@pytest.mark.slow  # imports lm-eval
@pytest.mark.parametrize("task", bbh.TASKS)
def test_prompts_requests_and_targets_equal_lm_eval(data_dir, task):
    rows = local_rows(data_dir, task)
    theirs = lm_eval_task(task, rows)
    (ours,) = resolve(bbh.spec_name(task))
    instances = ours.instances(data_dir, limit=DOCS_PER_TASK)
    docs = list(theirs.test_docs())
    # the parsed cot-prompts shots are lm-eval's YAML samples, in order
    cot = ours.cot_prompt(data_dir)
    assert [{"input": q, "target": a} for q, a in cot.shots] == list(theirs.fewshot_docs())
    gen = theirs.config.generation_kwargs
    for inst, doc in zip(instances, docs[:DOCS_PER_TASK]):
        assert inst.prompt == theirs.fewshot_context(doc, 3)
        assert inst.target == theirs.doc_to_target(doc)
        r = inst.request
        assert (r.stop, r.max_gen_toks, r.do_sample, r.temperature, r.repeats) == \
            (tuple(gen["until"]), gen["max_gen_toks"], gen["do_sample"], gen["temperature"], 1)
        assert inst.metadata["subject"] == task and inst.metadata["benchmark"] == "bbh"
    assert len(docs) == len(ours.docs(data_dir)) == bbh.BBH_TEST[task]


@pytest.mark.slow  # imports lm-eval
def test_zero_shots_equals_lm_eval_and_too_many_is_an_error(data_dir):
    rows = local_rows(data_dir, "navigate")
    theirs = lm_eval_task("navigate", rows)
    (ours,) = resolve("bbh_navigate:cot::lm_eval", num_shots=0)
    first = theirs.test_docs()[0]
    assert ours.instances(data_dir, limit=1)[0].prompt == theirs.fewshot_context(first, 0)
    (four,) = resolve("bbh_navigate:cot::lm_eval", num_shots=4)
    with pytest.raises(UserError, match="has 3 few-shot examples, 4 were asked for"):
        four.instances(data_dir, limit=1)


# Realistic completions (already cut at lm-eval's stop sequences).
OUTPUTS = {
    "date_understanding": [
        "If today is Christmas Eve of 1937, then today's date is December 24, 1937. The date "
        "tomorrow is 12/25/1937. So the answer is (B).",
        "Today is 12/24/1937, so tomorrow is 12/25/1937. So the answer is (C).",
        "So the answer is (B)",                       # no period: (?=.) eats ")"
        "The answer is (B).",                        # capital T: no match
        "",
    ],
    "boolean_expressions": [
        "not ( True ) = False; False and True = False. So the answer is False.",
        "Z = A and B = True. So the answer is True.",
        "So the answer is false.",                   # case matters
    ],
    "multistep_arithmetic_two": [
        "A = -3, B = 27, so A * B = -81. So the answer is -81.",
        "So the answer is 24",
        "First, the answer is 5. Then, the answer is 24.",   # greedy to the end of the line
    ],
    "word_sorting": [
        "So the answer is abc def ghi.",
        "The sorted list is: apple banana.",
    ],
    "dyck_languages": [
        "We close the stack in order. So the answer is ] ].",
        "So the answer is ) ].",
    ],
    "sports_understanding": [
        "Joao Moutinho is a soccer player. So the answer is no.",
        "So the answer is yes.\nAnd again the answer is no.",
    ],
}


@pytest.mark.slow  # imports lm-eval
@pytest.mark.parametrize("task", sorted(OUTPUTS))
def test_extraction_and_exact_match_equal_lm_eval_filters(data_dir, task):
    from lm_eval.api.instance import Instance as LmInstance

    rows = local_rows(data_dir, task)
    theirs = lm_eval_task(task, rows)
    (ours,) = resolve(bbh.spec_name(task))
    inst = ours.instances(data_dir, limit=1)[0]
    doc = theirs.test_docs()[0]
    outputs = OUTPUTS[task] + [inst.target, f"So the answer is {inst.target}."]
    for text in outputs:
        lm_inst = LmInstance(request_type="generate_until", doc=doc, arguments=("", {}), idx=0)
        lm_inst.resps = [text]
        (ensemble,) = theirs._filters                   # "get-answer": regex, take_first
        ensemble.apply([lm_inst])
        extracted = lm_inst.filtered_resps["get-answer"]
        expected = theirs.process_results(doc, [extracted])["exact_match"]
        score = ours.score(inst, GenerateResult(samples=(Generation(text, 10, "stop"),)))
        assert score.predicted_answer == extracted, text
        assert score.metrics == {"exact_match": float(expected)}, text
        assert score.is_correct is bool(expected) and score.correct_answer == inst.target


def test_cot_prompt_parsing_errors(data_dir, tmp_path):
    with pytest.raises(UserError, match="expected a '-----' line"):
        bbh.parse_cot_prompt("no separator", "x.txt")
    with pytest.raises(UserError, match="shot 1 has no line"):
        bbh.parse_cot_prompt("canary\n-----\nDescribe.\n\nQ: a question\nA: 42", "x.txt")
    with pytest.raises(UserError, match="no 'Q: ...' shots"):
        bbh.parse_cot_prompt("canary\n-----\nDescribe.", "x.txt")
    target = tmp_path / "bbh" / "bbh"
    target.mkdir(parents=True)
    (target / "navigate.json").write_text((data_dir / "bbh" / "bbh" / "navigate.json").read_text())
    (task,) = resolve("bbh_navigate:cot::lm_eval")
    assert len(task.docs(tmp_path)) == 250
    with pytest.raises(UserError, match="chain-of-thought prompt for navigate not found"):
        task.instances(tmp_path)
    (target / "navigate.json").write_text('{"examples": [{"input": "q"}]}')
    with pytest.raises(UserError, match=r"examples\[0\] needs string fields"):
        task.docs(tmp_path)
