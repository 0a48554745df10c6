"""Real runs of `proctor run` / `proctor prompts` on the embedded SmolLM2 model and real data."""

import json

import pyarrow.parquet as pq
import pytest

from proctor.cli import main

pytestmark = pytest.mark.slow  # the real SmolLM2


@pytest.fixture(scope="module")
def real_run(data_dir, tmp_path_factory):
    from proctor.backends.models import cache_root

    root = tmp_path_factory.mktemp("e2e")
    out = root / "run"
    # A fresh results cache, so the model really scores; the converted model is shared.
    (cache_root() / "models").mkdir(parents=True, exist_ok=True)
    (root / "cache").mkdir()
    (root / "cache" / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROCTOR_CACHE_DIR", str(root / "cache"))
        code = run_cli(data_dir, out)
    assert code == 0
    assert (root / "cache" / "results.sqlite").exists()
    return out


def run_cli(data_dir, out):
    return main([
        "run", "--model", "smollm2-135m",
        "--tasks", "mmlu_astronomy:mc::olmes,arc_easy:rc::olmes",
        "--limit", "6", "--data-dir", str(data_dir), "--output", str(out),
        "--save-requests", "--no-progress",
    ])


def test_run_directory_has_every_record(real_run):
    metrics = json.loads((real_run / "metrics.json").read_text())
    assert set(metrics["primary_scores"]) == {"mmlu_astronomy:mc::olmes", "arc_easy:rc::olmes"}
    mmlu = metrics["tasks"]["mmlu_astronomy:mc::olmes"]
    assert mmlu["num_instances"] == 6 and mmlu["primary_metric"] == "acc_raw"
    assert 0.0 <= mmlu["primary_score"] <= 1.0
    assert set(metrics["tasks"]["arc_easy:rc::olmes"]["metrics"]) >= {"acc_raw", "acc_per_char", "acc_uncond"}
    assert metrics["versions"]["torch"] and metrics["model_config"]["fingerprint"]
    assert metrics["model_config"]["dtype"] == "float32"
    timing, engine = metrics["timing"], metrics["engine"]
    assert 0 < timing["time_to_first_batch_seconds"] <= timing["total_seconds"]
    assert timing["start_to_first_model_call_seconds"] > timing["data_seconds"]  # the CLI counts its start-up
    keys = {
        json.loads(line)["request_key"]
        for task in ("mmlu_astronomy-mc-olmes", "arc_easy-rc-olmes")
        for line in (real_run / task / "requests.jsonl").open()
    }
    assert engine["cached"] == 0 and engine["unique"] == len(keys)
    # MMLU's 5-shot block and ARC's few-shot block are each computed once, not per row (as a
    # prefix, or as a segment where the rows sharing it fit in one batch)
    assert engine["prefixes_run"] >= 1 and engine["tokens_run"] < engine["tokens_total"]

    preds = [json.loads(line) for line in (real_run / "mmlu_astronomy-mc-olmes" / "predictions.jsonl").open()]
    assert [p["doc_id"] for p in preds] == list(range(6))
    first = preds[0]
    assert set(first) >= {"query_id", "doc_id", "native_id", "metrics", "model_output", "label"}
    assert len(first["model_output"]) == 4
    assert all(o["num_tokens"] == 1 and o["sum_logits"] < 0 for o in first["model_output"])

    requests = [json.loads(line) for line in (real_run / "arc_easy-rc-olmes" / "requests.jsonl").open()]
    assert any(r["uncond"] and r["request"]["context"] == "Answer:" for r in requests)

    sidecar = pq.read_table(real_run / "query_metadata.parquet").to_pylist()
    assert len(sidecar) == 12
    assert len({r["query_id"] for r in sidecar}) == 12
    by_qid = {p["query_id"]: p for p in preds}
    for row in sidecar:
        if row["task"] == "mmlu_astronomy:mc::olmes":
            pred = by_qid[row["query_id"]]
            assert row["is_correct"] == bool(pred["metrics"]["acc_raw"])
            assert row["subject"] == "astronomy" and row["benchmark"] == "mmlu_stem"
            assert row["correct_answer"] in "ABCD"


def test_prompts_writes_the_same_requests_without_a_model(real_run, data_dir, tmp_path):
    out = tmp_path / "prompts"
    assert main(["prompts", "--tasks", "arc_easy:rc::olmes", "--limit", "6", "--data-dir", str(data_dir), "--output", str(out)]) == 0
    assert (out / "arc_easy-rc-olmes" / "requests.jsonl").read_text() == (
        real_run / "arc_easy-rc-olmes" / "requests.jsonl"
    ).read_text()
