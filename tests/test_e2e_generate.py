"""`proctor run` on GSM8K with the embedded SmolLM2 model: greedy generation end to end.

The task generates up to 512 tokens; this test lowers that (here only, by patching the
variant in-process) so it stays within its time budget on a 2-core CPU. It also runs
torch on one thread: on a shared 2-core machine two threads spin-waiting on each other
made decoding 6x slower (83 s vs 13.5 s for the same 3 x 800-token prefill + 16 steps).
"""

import dataclasses
import json

import pyarrow.parquet as pq
import pytest
import torch

from proctor.cli import main
from proctor.metrics.answers import extract_last_number
from proctor.tasks import gsm8k

pytestmark = pytest.mark.slow  # the real SmolLM2

MAX_GEN_TOKS = 64   # test-local: the spec's 512 costs minutes on this CPU
SPEC = "gsm8k::olmes"


@pytest.fixture(scope="module")
def gsm8k_run(data_dir, tmp_path_factory):
    from proctor.backends.models import cache_root

    root = tmp_path_factory.mktemp("e2e-gen")
    (cache_root() / "models").mkdir(parents=True, exist_ok=True)
    (root / "cache").mkdir()
    (root / "cache" / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    variant = dataclasses.replace(gsm8k.VARIANTS[SPEC], max_gen_toks=MAX_GEN_TOKS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PROCTOR_CACHE_DIR", str(root / "cache"))
            mp.setitem(gsm8k.VARIANTS, SPEC, variant)
            code = main(["run", "--model", "smollm2-135m", "--tasks", SPEC, "--limit", "3",
                         "--data-dir", str(data_dir), "--output", str(root / "run"), "--save-requests",
                         "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return root / "run"


def test_predictions_sidecar_and_metrics(gsm8k_run, data_dir):
    preds = [json.loads(line) for line in (gsm8k_run / "gsm8k-olmes" / "predictions.jsonl").open()]
    assert [p["doc_id"] for p in preds] == [0, 1, 2]
    golds = [json.loads(line)["answer"].split("####")[-1].strip()
             for line, _ in zip((data_dir / "gsm8k" / "test.jsonl").open(), range(3))]
    assert [p["label"] for p in preds] == golds
    for p in preds:
        (sample,) = p["model_output"]
        assert sample["finish_reason"] in ("stop", "eos", "length")
        assert 0 < sample["num_tokens"] <= MAX_GEN_TOKS
        assert sample["text"].strip() and "\n\n" not in sample["text"] and "Question:" not in sample["text"]
        assert sample["extracted"] == extract_last_number(sample["text"])
        assert p["metrics"]["exact_match"] == float(sample["correct"])

    sidecar = pq.read_table(gsm8k_run / "query_metadata.parquet").to_pylist()
    assert [r["query_id"] for r in sidecar] == [p["query_id"] for p in preds]
    for row, p in zip(sidecar, preds):
        assert row["benchmark"] == "gsm8k" and row["task"] == SPEC
        assert row["predicted_answer"] == p["model_output"][0]["extracted"]
        assert row["correct_answer"] == p["label"]
        assert row["is_correct"] == bool(p["metrics"]["exact_match"])

    metrics = json.loads((gsm8k_run / "metrics.json").read_text())
    task = metrics["tasks"][SPEC]
    assert task["primary_metric"] == "exact_match" and 0.0 <= task["primary_score"] <= 1.0
    assert task["generation"] == {"max_gen_toks": MAX_GEN_TOKS, "stop": list(gsm8k.STOP), "do_sample": False,
                                  "temperature": 0.0, "top_p": 1.0, "repeats": 1}
    assert metrics["primary_scores"][SPEC]["score"] == task["primary_score"]
    assert metrics["model_config"]["seed"] == 1234
    engine = metrics["engine"]
    assert engine["gen_unique"] == 3 and engine["gen_cached"] == 0 and engine["gen_samples"] == 3
    assert engine["gen_tokens"] == sum(p["model_output"][0]["num_tokens"] for p in preds)
    assert engine["generated_tokens_per_second"] > 0
    assert 0 < metrics["timing"]["time_to_first_batch_seconds"] <= metrics["timing"]["total_seconds"]

    requests = [json.loads(line) for line in (gsm8k_run / "gsm8k-olmes" / "requests.jsonl").open()]
    assert [r["request_type"] for r in requests] == ["generate"] * 3
    assert requests[0]["request"]["max_gen_toks"] == MAX_GEN_TOKS and requests[0]["label"] == golds[0]
