"""The seed suites through `proctor run` with a tiny random model.

`data_attribution::olmo3` runs whole: the sidecar covers all four benchmarks. The real
`slimpajama_dc::leaderboard` needs the HellaSwag train split (not in the local data) and
HumanEval's sandbox, so its run uses the same table over its four loglikelihood members:
what is checked is the table's shape in metrics.json and on the terminal (average with
MMLU counted once, RRGS from the 57 subjects).
"""

import dataclasses
import json

import pytest

from proctor.cli import main
from proctor.tasks import catalog
from proctor.tasks.seed_suites import DATA_ATTRIBUTION, SLIMPAJAMA_DC
from tinylm import build_tiny_model

CHOICE_TABLE = dataclasses.replace(
    SLIMPAJAMA_DC, name="slimpajama_dc_choice::test",
    members=("arc_challenge::leaderboard", "mmlu::leaderboard", "truthfulqa_mc2::leaderboard",
             "bigbench::leaderboard"))


@pytest.mark.slow  # heavy: runs the CLI end to end, over 3 s
def test_table_suite_end_to_end(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(catalog.suites(), CHOICE_TABLE.name, CHOICE_TABLE)
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    model, out = build_tiny_model(tmp_path / "tiny"), tmp_path / "run"
    assert main(["run", "--model", str(model), "--tasks", CHOICE_TABLE.name, "--limit", "1",
                 "--max-length", "512", "--data-dir", str(data_dir), "--output", str(out),
                 "--no-progress"]) == 0

    metrics = json.loads((out / "metrics.json").read_text())
    table = metrics["primary_scores"][CHOICE_TABLE.name]
    tasks = metrics["tasks"]
    assert len(tasks) == 1 + 57 + 1 + 9 and table["num_tasks"] == 68
    subjects = [t["primary_score"] for name, t in tasks.items() if name.startswith("mmlu_")]
    mmlu = sum(subjects) / 57
    bigbench = sum(t["primary_score"] for n, t in tasks.items() if n.startswith("bigbench_")) / 9
    members = table["members"]
    assert members["mmlu::leaderboard"]["aggregation"] == "macro"
    assert members["mmlu::leaderboard"]["score"] == pytest.approx(mmlu)
    assert members["truthfulqa_mc2::leaderboard"]["metric"] == "mc2"
    expected = (tasks["arc_challenge::leaderboard"]["primary_score"] + mmlu
                + tasks["truthfulqa_mc2::leaderboard"]["primary_score"] + bigbench) / 4
    assert table["aggregation"] == "member_mean" and table["score"] == pytest.approx(expected)
    assert table["rrgs"] == pytest.approx(1 - sum(abs(s - 0.25) for s in subjects) / 57)

    printed = capsys.readouterr().out
    assert "member_mean(mixed)" in printed and "rrgs" in printed
    assert "macro(acc_raw)" in printed   # the MMLU member's row


def test_seed_suite_plans_all_four_benchmarks(data_dir):
    from proctor.pipeline import plan

    evaluation = plan([DATA_ATTRIBUTION.name], data_dir, 2)
    (spec,) = evaluation.specs
    assert spec.is_suite and len(spec.task_names) == 1 + 12 + 18 + 1
    instances = [i for run in evaluation.tasks.values() for i in run.instances]
    assert len(instances) == 2 * 32
    assert {i.metadata["benchmark"] for i in instances} == {
        "socialiqa", "mmlu_social_science", "mmlu_stem", "gsm8k"}
    assert len({i.query_id for i in instances}) == 64
    gsm8k = evaluation.tasks["gsm8k::olmo3:n8:v2"].instances
    assert [i.query_id for i in gsm8k] == ["gsm8k::olmo3:n8:v2#0", "gsm8k::olmo3:n8:v2#1"]
    assert gsm8k[0].request.repeats == 8 and gsm8k[0].request.temperature == 0.6



@pytest.mark.slow  # heavy: runs the CLI end to end, over 3 s
def test_seed_suite_run_writes_the_sidecar_for_all_four(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    model, out = build_tiny_model(tmp_path / "tiny"), tmp_path / "run"
    assert main(["run", "--model", str(model), "--tasks", DATA_ATTRIBUTION.name, "--limit", "1",
                 "--max-length", "1024", "--data-dir", str(data_dir), "--output", str(out),
                 "--no-progress"]) == 0
    sidecar = [json.loads(line) for line in (out / "query_metadata.jsonl").open()]
    assert len(sidecar) == 32 and len({r["query_id"] for r in sidecar}) == 32
    assert {r["benchmark"] for r in sidecar} == {"socialiqa", "mmlu_social_science", "mmlu_stem", "gsm8k"}
    (gsm8k,) = [r for r in sidecar if r["benchmark"] == "gsm8k"]
    (pred,) = [json.loads(line) for line in (out / "gsm8k-olmo3-n8-v2" / "predictions.jsonl").open()]
    first = pred["model_output"][0]
    assert len(pred["model_output"]) == 8
    assert gsm8k["is_correct"] == first["correct"] and gsm8k["predicted_answer"] == first["extracted"]
    assert gsm8k["correct_answer"] == "18"

    entry = json.loads((out / "metrics.json").read_text())["primary_scores"][DATA_ATTRIBUTION.name]
    assert entry["score"] is None and "macro" not in entry and "micro" not in entry
    assert {m: e["metric"] for m, e in entry["members"].items()} == {
        "socialiqa:mc::xlarge": "acc_raw", "mmlu_social_sciences:mc::olmes": "acc_raw",
        "mmlu_stem:mc::olmes": "acc_raw", "gsm8k::olmo3:n8:v2": "pass_at_1"}
    assert "each member's" in capsys.readouterr().out
