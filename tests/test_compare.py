import json

import pytest

from proctor.cli import main
from proctor.compare import compare_runs
from proctor.errors import UserError
from run_records import choice_record, generation_record, run_record, task_record

MC = "mmlu_astronomy:mc::olmes"
GEN = "gsm8k::olmes"


def choice_row(i: int, predicted: int, logits: list[float]):
    return choice_record(MC, i, predicted, logits)


def gen_row(i: int, text: str, correct: bool):
    return generation_record(GEN, i, text, correct)


def write_run(path, choice_rows, gen_rows):
    run_record(task_record(MC, choice_rows, "choice"), task_record(GEN, gen_rows, "generation")).write(path)


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
        (runs[1] / "gsm8k-olmes" / "predictions.jsonl").write_text(json.dumps(gen_row(99, "x", True).to_dict()) + "\n")
        compare_runs(*runs)


# ---- hostile run directories: nothing but the one user-error type escapes ------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=12)
FUZZ_EXAMPLES = 150


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(["metrics", "predictions"]), value=JSON, raw=st.binary(max_size=64),
       use_raw=st.booleans())
def test_a_damaged_run_directory_is_a_user_error(runs, target, value, raw, use_raw):
    a, b = runs
    path = a / "metrics.json" if target == "metrics" else a / "mmlu_astronomy-mc-olmes" / "predictions.jsonl"
    original = path.read_bytes()
    try:
        path.write_bytes(raw if use_raw else (json.dumps(value) + "\n").encode())
        try:
            compare_runs(a, b)
        except UserError as e:
            assert "\n" not in str(e)
    finally:
        path.write_bytes(original)


def test_a_deeply_nested_metrics_file_is_a_user_error(runs):
    (runs[0] / "metrics.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(UserError, match="cannot read"):
        compare_runs(*runs)


def test_json_output_never_replaces_a_users_file(runs, tmp_path, capsys):
    mine = tmp_path / "notes.json"
    mine.write_text("mine")
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(mine)]) == 2
    assert "did not write" in capsys.readouterr().err and mine.read_text() == "mine"
    fresh = tmp_path / "agreement.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(fresh)]) == 0
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(fresh)]) == 0  # its own: replaced
