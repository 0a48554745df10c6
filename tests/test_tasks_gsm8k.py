"""GSM8K: instances from the real data, exact prompt bytes, requests, and per-doc scoring."""

import json

import pytest

from proctor.errors import UserError
from proctor.requests import Generate, GenerateResult, Generation
from proctor.tasks.gsm8k import GSM8KTask
from proctor.tasks.registry import leaf_specs, resolve, task_config, task_rows

N8 = "gsm8k::olmo3:n8:v2"
STOP = ("Question:", "</s>", "<|im_end|>", "\n\n")


def raw_test_rows(data_dir):
    return [json.loads(line) for line in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()]


def test_n8_instances_from_the_real_test_split(data_dir):
    (task,) = resolve(N8)
    assert isinstance(task, GSM8KTask)
    instances = task.instances(data_dir)
    assert len(instances) == 1319
    assert [i.doc_id for i in instances] == list(range(1319))
    assert [i.native_id for i in instances] == list(range(1319))
    assert instances[0].query_id == "gsm8k::olmo3:n8:v2#0"
    assert instances[-1].query_id == "gsm8k::olmo3:n8:v2#1318"
    assert len({i.query_id for i in instances}) == 1319
    assert instances[0].metadata == {"benchmark": "gsm8k", "subject": None,
                                     "reasoning_type": None, "split": "test"}
    # gold = text after the last ####, cleaned like a prediction
    assert instances[0].target == "18"
    assert instances[146].target == "2125"          # "#### 2,125"
    assert instances[489].target == "10"            # "#### -10": the integer's sign is dropped
    assert task.instances(data_dir, limit=5) == instances[:5]


def test_first_prompt_is_byte_exact(data_dir):
    shots = json.loads((data_dir / "fewshot" / "STD_GSM8k.json").read_text())["examples"]
    assert len(shots) == 8
    first = raw_test_rows(data_dir)[0]
    expected = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
    expected += f"Question: {first['question']}\nAnswer:"
    prompt = resolve(N8)[0].instances(data_dir, limit=1)[0].prompt
    assert prompt == expected
    assert prompt.startswith("Question: There are 15 trees in the grove. Grove workers will plant "
                             "trees in the grove today. After they are done, there will be 21 "
                             "trees. How many trees did the grove workers plant today?\nAnswer: "
                             "There are 15 trees originally.")
    assert "So the answer is 6.\n\nQuestion: If there are 3 cars" in prompt
    assert prompt.endswith("23 - 15 is 8. So the answer is 8.\n\nQuestion: Janet\u2019s ducks lay "
                           "16 eggs per day. She eats three for breakfast every morning and bakes "
                           "muffins for her friends every day with four. She sells the remainder "
                           "at the farmers' market daily for $2 per fresh duck egg. How much in "
                           "dollars does she make every day at the farmers' market?\nAnswer:")


def test_request_fields_per_variant(data_dir):
    n8 = resolve(N8)[0].instances(data_dir, limit=1)[0]
    assert n8.requests == (n8.request,) and n8.uncond_requests == ()
    assert n8.request == Generate(context=n8.prompt, max_gen_toks=512, stop=STOP, do_sample=True,
                                  temperature=0.6, top_p=0.6, repeats=8)
    greedy = resolve("gsm8k::olmes")[0].instances(data_dir, limit=1)[0]
    assert greedy.prompt == n8.prompt
    assert greedy.request == Generate(context=n8.prompt, max_gen_toks=512, stop=STOP,
                                      do_sample=False, temperature=0.0, top_p=1.0, repeats=1)


def test_spec_resolution_and_listing(data_dir):
    config = task_config(N8)
    assert (config.split, config.num_shots, config.primary_metric, config.fewshot_source) == \
        ("test", 8, "pass_at_1", "STD:GSM8k")
    assert (config.dataset_path, config.dataset_name) == ("openai/gsm8k", "main")
    assert task_config("gsm8k::olmes").primary_metric == "exact_match"
    assert leaf_specs(N8) == [N8]
    assert resolve(N8)[0].metric_names == (
        "pass_at_1", "pass_at_2", "pass_at_4", "pass_at_8",
        "maj_at_1", "maj_at_2", "maj_at_4", "maj_at_8", "exact_match")
    assert resolve("gsm8k::olmes")[0].metric_names == ("exact_match",)
    with pytest.raises(UserError, match="did you mean .*'gsm8k::olmo3:n8:v2'"):
        resolve("gsm8k::olmo3:n8")
    rows = {r.spec: r for r in task_rows("gsm8k", data_dir=data_dir)}
    assert (rows[N8].items, rows[N8].items_source, rows[N8].shots) == (1319, "data", 8)
    assert {r.spec: r.items for r in task_rows("gsm8k::olm")} == {N8: 1319, "gsm8k::olmes": 1319}


def sample(text, finish="stop"):
    return Generation(text=text, num_tokens=len(text.split()), finish_reason=finish)


# Eight realistic samples for test doc 0 (gold 18): four right, four wrong.
SAMPLES = (
    "She has 16 - 3 - 4 = 9 eggs left. 9 x 2 = 20. So the answer is 20.",
    "She uses 3 + 4 = 7 eggs, so 16 - 7 = 9 are sold for 9 * $2 = $18.00. So the answer is $18.00.",
    "Janet has 16 - 3 - 4 = 9 eggs to sell. She makes 9 * 2 = 18 dollars. So the answer is 18.",
    "16 - 7 = 9 eggs, 9 * 2 = 18 dollars a day, 18 * 7 = 126 a week. So the answer is 126.",
    "She sells 16 - 3 - 4 = 9 eggs for $2 each, making $18. So the answer is 18.",
    "16 - 3 = 13. 13 - 4 = 9. 9 * 2 = 18. So the answer is 18",
    "She sells the rest of the eggs at the market.",
    "The remainder is 16 - 3 - 4 = 9 eggs. At $2 each she makes $18",   # cut by max_gen_toks
)


def test_doc_score_from_eight_samples(data_dir):
    (task,) = resolve(N8)
    instance = task.instances(data_dir, limit=1)[0]
    result = GenerateResult(samples=tuple(sample(t) for t in SAMPLES[:-1])
                            + (sample(SAMPLES[-1], "length"),))
    score = task.score(instance, result)
    extracted = [o.details["extracted"] for o in score.model_output]
    assert extracted == ["20", "18.00", "18", "126", "18", "18",
                         "She sells the rest of the eggs at the market.", "18"]
    assert [o.details["correct"] for o in score.model_output] == [False, False, True, False, True, True,
                                                          False, True]
    m = score.metrics
    assert list(m) == list(task.metric_names)
    assert m["pass_at_1"] == pytest.approx(0.5)
    assert m["pass_at_2"] == pytest.approx(1 - 6 / 28)     # c=4, n=8
    assert m["pass_at_4"] == pytest.approx(1 - 1 / 70)
    assert m["pass_at_8"] == 1.0
    # votes: k=1 "20"; k=2 tie 20/18.00 -> "20"; k=4 all differ -> "20"; k=8 "18" x4
    assert (m["maj_at_1"], m["maj_at_2"], m["maj_at_4"], m["maj_at_8"]) == (0.0, 0.0, 0.0, 1.0)
    assert m["exact_match"] == 0.0                         # first sample only
    assert (score.predicted_answer, score.correct_answer, score.is_correct) == ("20", "18", False)
    assert score.model_output[-1].finish_reason == "length"


def test_greedy_doc_score_and_signs(data_dir):
    (task,) = resolve("gsm8k::olmes")
    instance = task.instances(data_dir)[489]                # gold "#### -10"
    answer = sample("It falls by 10. So the answer is -10.")
    score = task.score(instance, GenerateResult(samples=(answer,)))
    assert score.metrics == {"exact_match": 1.0}
    assert (score.predicted_answer, score.correct_answer, score.is_correct) == ("10", "10", True)
    empty = task.score(instance, GenerateResult(samples=(sample(""),)))
    assert empty.metrics == {"exact_match": 0.0} and empty.predicted_answer == ""
    with pytest.raises(ValueError, match="without samples"):
        task.score(instance, GenerateResult(samples=()))


def test_bad_limit_missing_fewshot_and_malformed_rows(data_dir, tmp_path):
    (task,) = resolve(N8)
    with pytest.raises(UserError, match="--limit must be a positive integer"):
        task.instances(data_dir, limit=0)
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(
        (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[0] + "\n")
    assert len(task.docs(tmp_path)) == 1
    with pytest.raises(UserError, match="few-shot list not found"):
        task.instances(tmp_path)
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(UserError, match=r"test.jsonl:1: a GSM8K row needs"):
        task.docs(tmp_path)


def test_local_train_split_is_hub_shaped(data_dir):
    from proctor.data import load_split

    rows = load_split("openai/gsm8k", "main", "train", data_dir)
    assert len(rows) == 7473 and set(rows[0]) == {"question", "answer"}
    with pytest.raises(UserError, match="GSM8K has no split 'validation'"):
        load_split("openai/gsm8k", "main", "validation", data_dir)
