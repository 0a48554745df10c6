import json

import pytest

from proctor.cli import main
from proctor.compare import compare_runs
from proctor.errors import UserError

MC = "mmlu_astronomy:mc::olmes"
GEN = "gsm8k::olmes"


def choice_row(i: int, predicted: int, logits: list[float]) -> dict:
    return {"query_id": f"{MC}#{i}", "doc_id": i, "native_id": i, "label": 0,
            "metrics": {"predicted_index_raw": predicted, "acc_raw": float(predicted == 0)},
            "model_output": [{"sum_logits": v, "num_tokens": 1} for v in logits]}


def gen_row(i: int, text: str, correct: bool) -> dict:
    return {"query_id": f"{GEN}#{i}", "doc_id": i, "native_id": i, "label": "4",
            "metrics": {"exact_match": float(correct)}, "model_output": [{"text": text}]}


def write_run(path, choice_rows, gen_rows):
    tasks = {MC: {"primary_metric": "acc_raw"}, GEN: {"primary_metric": "exact_match"}}
    path.mkdir()
    (path / "metrics.json").write_text(json.dumps({"tasks": tasks}))
    for name, rows in (("mmlu_astronomy-mc-olmes", choice_rows), ("gsm8k-olmes", gen_rows)):
        (path / name).mkdir()
        (path / name / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def runs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a, [choice_row(i, 0 if i < 6 else 1, [-1.0, -2.0]) for i in range(10)],
              [gen_row(i, f" answer {i}", i < 3) for i in range(4)])
    # B: items 4 and 5 flip to wrong, item 6 to right; logits shift by up to 0.25; one gen text differs
    write_run(b, [choice_row(i, 1 if i in (4, 5) else 0 if i < 7 else 1, [-1.0 - 0.025 * i, -2.0])
                  for i in range(10)],
              [gen_row(i, " other" if i == 3 else f" answer {i}", i < 3) for i in range(4)] + [gen_row(9, "x", True)])
    return a, b


def test_agreement_per_task(runs):
    mc, gen = compare_runs(*runs)
    assert (mc.task, mc.n, mc.identical) == (MC, 10, 7)
    assert mc.max_abs_delta_sum_logits == pytest.approx(0.225)
    assert (mc.score_a, mc.score_b) == (0.6, 0.5)
    assert (mc.a_only_correct, mc.b_only_correct, mc.test) == (2, 1, "mcnemar_exact")
    assert mc.p_value == pytest.approx(1.0)   # 2 vs 1 discordant pairs: no evidence
    assert (gen.n, gen.only_b, gen.identical, gen.max_abs_delta_sum_logits) == (4, 1, 3, None)
    assert gen.score_a == gen.score_b == 0.75 and gen.p_value == 1.0


def test_cli_prints_and_writes_json(runs, tmp_path, capsys):
    out = tmp_path / "agreement.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(out)]) == 0
    assert "mmlu_astronomy:mc::olmes" in capsys.readouterr().out
    assert [row["identical"] for row in json.loads(out.read_text())] == [7, 3]


def test_not_a_run_directory(tmp_path, runs, capsys):
    assert main(["compare", str(runs[0]), str(tmp_path)]) == 2
    assert "is not a finished run directory" in capsys.readouterr().err
    with pytest.raises(UserError, match="share no query_id"):
        (runs[1] / "gsm8k-olmes" / "predictions.jsonl").write_text(json.dumps(gen_row(99, "x", True)) + "\n")
        compare_runs(*runs)
