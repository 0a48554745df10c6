"""Bad input around generation: stop strings that never appear, empty generations, a
malformed BIG-bench task.json — correct verdicts and one clear message each. (A completion
that is not valid Python is judged in tests/test_tasks_humaneval.py.)"""

import pytest

from proctor.engine import Engine
from proctor.errors import UserError
from proctor.requests import Generate, GenerateResult, Generation
from proctor.tasks.registry import resolve

from tinylm import build_tiny_model


def test_a_stop_string_that_never_appears_changes_nothing(tmp_path):
    from proctor.backends import load_backend

    backend = load_backend(str(build_tiny_model(tmp_path / "tiny")), device="cpu", max_length=256)
    engine = Engine(backend, batch_size=2, progress=False)
    plain, stopped = engine.generate([
        Generate("Question: what is two plus two?\nAnswer:", max_gen_toks=12),
        Generate("Question: what is two plus two?\nAnswer:", max_gen_toks=12, stop=("@@never@@",)),
    ])
    assert stopped.samples == plain.samples
    assert stopped.samples[0].finish_reason in ("length", "eos")


def test_empty_and_cut_off_gsm8k_samples_score_as_wrong_without_error(data_dir):
    (task,) = resolve("gsm8k::olmo3:n8:v2")
    instance = task.instances(data_dir, limit=1)[0]  # gold 18
    samples = (Generation("", 0, "eos"), Generation("", 1, "stop"), Generation("   ", 3, "stop"),
               Generation("She sells the eggs and", 512, "length")) * 2
    score = task.score(instance, GenerateResult(samples))
    assert score.metrics["pass_at_1"] == 0.0 and score.metrics["pass_at_8"] == 0.0
    assert score.metrics["maj_at_8"] == 0.0 and score.metrics["exact_match"] == 0.0
    assert not score.is_correct and score.correct_answer == "18"
    assert [o.finish_reason for o in score.model_output[:4]] == ["eos", "stop", "stop", "length"]


def test_malformed_bigbench_task_json_is_one_clear_error(tmp_path):
    task_json = tmp_path / "bigbench" / "original_task_json" / "date_understanding" / "task.json"
    task_json.parent.mkdir(parents=True)
    task_json.write_text('{"examples": [{"input": "Q", "target_scores": ')
    (task,) = resolve("bigbench_date_understanding::leaderboard")
    with pytest.raises(UserError, match="task.json"):
        task.instances(tmp_path, 1)
    task_json.write_text('{"examples": [{"target_scores": {"a": 1}}]}')
    with pytest.raises(UserError, match=r"examples\[0\] has no string 'input'"):
        task.instances(tmp_path, 1)
