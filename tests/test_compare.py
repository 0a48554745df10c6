import json
import math
from dataclasses import replace

import pytest

from proctor.outputs.run_dir import write_run as proctor_write_run

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
    proctor_write_run(run_record(task_record(MC, choice_rows, "choice"), task_record(GEN, gen_rows, "generation")), path)


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
    assert (mc.task, mc.kind, mc.n, mc.identical) == (MC, "task", 10, 7)
    assert mc.max_abs_delta_sum_logits == pytest.approx(0.225)
    assert (mc.a_score, mc.b_score, mc.diff) == (0.6, 0.5, pytest.approx(-0.1))
    assert (mc.a_only, mc.b_only, mc.test) == (2, 1, "mcnemar_exact")
    assert mc.p_value == pytest.approx(1.0)   # 2 vs 1 discordant pairs: no evidence
    assert (gen.n, gen.only_b, gen.identical, gen.max_abs_delta_sum_logits) == (4, 1, 3, None)
    assert gen.a_score == gen.b_score == 0.75 and gen.p_value == 1.0 and gen.diff == 0


def test_the_paired_statistics_of_a_task(runs):
    """d = B − A per document is -1 twice, +1 once, 0 seven times: its mean, its standard error
    sqrt(var(d) / n), the interval, the MDE, and Holm over the two tasks, by hand."""
    mc, gen = compare_runs(*runs)
    d = [-1, -1, 1] + [0] * 7
    mean = sum(d) / 10
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / 9 / 10)
    assert mc.stderr == pytest.approx(se)
    assert mc.diff_ci95 == pytest.approx((mean - 1.959964 * se, mean + 1.959964 * se))
    assert mc.mde80 == pytest.approx((1.959964 + 0.841621) * se)
    lo, hi = mc.diff_ci95_bootstrap
    assert -0.5 <= lo < mean < hi <= 0.3
    assert mc.clusters == 10 and mc.cluster_by is None
    assert mc.p_holm == pytest.approx(1.0) and gen.p_holm == pytest.approx(1.0)


def test_json_has_the_documented_keys(runs, tmp_path):
    out = tmp_path / "comparison.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["run_a"], doc["bootstrap_replicates"], doc["bootstrap_seed"]) == (str(runs[0]), 10_000, 0)
    row = doc["comparisons"][0]
    for key in ("n", "a_score", "b_score", "diff", "diff_ci95", "p_value", "p_holm", "mde80"):
        assert key in row
    assert len(row["diff_ci95"]) == 2 and row["diff_ci95"][0] < row["diff"] < row["diff_ci95"][1]


def test_cli_prints_and_writes_json(runs, tmp_path, capsys):
    out = tmp_path / "agreement.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mmlu_astronomy:mc::olmes" in printed and "MDE80" in printed
    assert [row["identical"] for row in json.loads(out.read_text())["comparisons"]] == [7, 3]


STEM = "mmlu_stem:mc::olmes"


def _stem_run(path, right: dict[str, int], per_subject: int = 4):
    """A run of the STEM suite: in subject s the first right[s] documents are right."""
    from proctor.outputs.records import SpecScore
    from proctor.tasks.registry import leaf_specs

    tasks = [task_record(spec, [choice_record(spec, i, 0 if i < right.get(spec, 0) else 1, [-1.0, -2.0])
                                for i in range(per_subject)], "choice") for spec in leaf_specs(STEM)]
    run = run_record(*tasks)
    scores = {**run.primary_scores, STEM: SpecScore("acc_raw", 0.5, None, 4 * len(tasks), aggregation="macro",
                                                    num_tasks=len(tasks), is_suite=True)}
    proctor_write_run(replace(run, primary_scores=scores), path)
    return leaf_specs(STEM)


def test_a_macro_suite_weighs_its_tasks_equally(tmp_path):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    leaves = _stem_run(a_dir, {})
    _stem_run(b_dir, {leaves[0]: 4, leaves[1]: 2})   # B: one subject all right, one half right
    rows = {r.task: r for r in compare_runs(a_dir, b_dir)}
    suite = rows[STEM]
    assert suite.kind == "suite" and suite.n == 4 * len(leaves)
    assert suite.diff == pytest.approx((1.0 + 0.5) / len(leaves))      # macro: mean of the task differences
    # each task's variance of its mean difference, combined with weights 1/T
    se_0, se_1 = 0.0, math.sqrt(sum((x - 0.5) ** 2 for x in (1, 1, 0, 0)) / 3 / 4)
    assert suite.stderr == pytest.approx(math.sqrt(se_0 ** 2 + se_1 ** 2) / len(leaves))
    assert suite.test == "wald_clustered" and suite.p_holm == pytest.approx(suite.p_value)  # one suite
    assert [r.kind for r in rows.values()].count("task") == len(leaves)


def test_clustering_by_subject_widens_the_interval(tmp_path):
    """Two subjects, each all right or all wrong together in B: 2 clusters, not 8 documents."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    leaves = _stem_run(a_dir, {})
    _stem_run(b_dir, {leaves[0]: 4, leaves[1]: 4})
    plain = {r.task: r for r in compare_runs(a_dir, b_dir)}[STEM]
    by_subject = {r.task: r for r in compare_runs(a_dir, b_dir, cluster_by="subject")}[STEM]
    assert by_subject.cluster_by == "subject" and by_subject.diff == pytest.approx(plain.diff)
    assert by_subject.clusters == len(leaves) < plain.clusters == 4 * len(leaves)


def test_n_samples_of_a_question_are_one_paired_unit(tmp_path):
    """GSM8K n=8: the paired unit is the question (its pass@1), never the sample."""
    from proctor.outputs.records import GenerationRecord, SampleOutput

    spec = "gsm8k::olmo3:n8:v2"

    def record(i: int, right: int) -> GenerationRecord:
        samples = tuple(SampleOutput("x", 1, "stop", {"extracted": "4", "correct": k < right}) for k in range(8))
        return GenerationRecord(f"{spec}#{i}", i, i, {"pass_at_1": right / 8}, samples, "4")

    proctor_write_run(run_record(task_record(spec, [record(i, 0) for i in range(6)], "generation")), tmp_path / "a")
    right_b = [8, 8, 4, 0, 0, 0]
    proctor_write_run(run_record(task_record(spec, [record(i, r) for i, r in enumerate(right_b)], "generation")), tmp_path / "b")
    (row,) = compare_runs(tmp_path / "a", tmp_path / "b")
    d = [r / 8 for r in right_b]
    mean = sum(d) / 6
    assert (row.n, row.clusters, row.diff) == (6, 6, pytest.approx(mean))
    assert row.stderr == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in d) / 5 / 6))  # 6 questions, not 48 samples
    assert row.a_only is None and row.test == "wald_clustered"


def test_not_a_run_directory(tmp_path, runs, capsys):
    assert main(["compare", str(runs[0]), str(tmp_path)]) == 2
    assert "is not a finished run directory" in capsys.readouterr().err
    with pytest.raises(UserError, match="share no query_id"):
        (runs[1] / "gsm8k-olmes" / "predictions.jsonl").write_text(json.dumps(gen_row(99, "x", True).to_dict()) + "\n")
        compare_runs(*runs, allow_edited=True)


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
            compare_runs(a, b, allow_edited=True)
        except UserError as e:
            assert "\n" not in str(e)
    finally:
        path.write_bytes(original)


def test_a_deeply_nested_metrics_file_is_a_user_error(runs):
    (runs[0] / "metrics.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(UserError, match="cannot read"):
        compare_runs(*runs, allow_edited=True)


def test_json_output_never_replaces_a_users_file(runs, tmp_path, capsys):
    mine = tmp_path / "notes.json"
    mine.write_text("mine")
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(mine)]) == 2
    assert "did not write" in capsys.readouterr().err and mine.read_text() == "mine"
    fresh = tmp_path / "agreement.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(fresh)]) == 0
    assert main(["compare", str(runs[0]), str(runs[1]), "--json", str(fresh)]) == 0  # its own: replaced


def test_an_undefined_error_is_null_in_the_json(tmp_path):
    """One document: no standard error, no interval; the file stays strict JSON."""
    for name, predicted in (("a", 0), ("b", 1)):
        proctor_write_run(run_record(task_record(MC, [choice_row(0, predicted, [-1.0, -2.0])], "choice")), tmp_path / name)
    out = tmp_path / "one.json"
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", str(out)]) == 0

    def refuse(constant):
        raise AssertionError(f"{constant} in --json output")

    (row,) = json.loads(out.read_text(), parse_constant=refuse)["comparisons"]
    assert row["stderr"] is None and row["diff_ci95"] == [None, None] and row["diff"] == -1.0
