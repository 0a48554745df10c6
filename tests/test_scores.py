"""Headline scores from fabricated per-task statistics: suite primaries, the SlimPajama-DC
table (average with MMLU counted once, RRGS), and the mixed-metric OLMo 3 seed suite."""

import io
import math

import pytest
from rich.console import Console

from proctor.pipeline import Plan, ScoredPlan, SpecPlan, primary_scores
from proctor.metrics import MeanStat
from proctor.report import print_results
from proctor.scores import TaskResult, spec_entry
from proctor.tasks.lm_eval import bigbench
from proctor.tasks.mmlu import SUBJECTS
from proctor.pipeline import TaskRun
from proctor.tasks.registry import leaf_specs, resolve, task_config


def stat(correct: int, n: int) -> MeanStat:
    return MeanStat.of([1.0] * correct + [0.0] * (n - correct))


def results_for(spec: str, make) -> dict[str, TaskResult]:
    """A TaskResult for every leaf of `spec`, its stat from `make(leaf_name, index)`."""
    return {name: TaskResult.of(task_config(name), make(name, i))
            for i, name in enumerate(leaf_specs(spec))}


def test_task_entry():
    results = {"arc_easy:mc::olmes": TaskResult("acc_raw", stat(3, 4))}
    assert spec_entry("arc_easy:mc::olmes", results) == {
        "metric": "acc_raw", "score": 0.75, "stderr": pytest.approx(0.25), "num_instances": 4}


def test_olmes_suite_headline_is_macro_with_micro_beside():
    # two subjects: 1/1 and 0/3 -> macro 0.5, micro 0.25
    sizes = {"mmlu_abstract_algebra:mc::olmes": (1, 1), "mmlu_astronomy:mc::olmes": (0, 3)}
    results = results_for("mmlu_stem:mc::olmes", lambda name, i: stat(*sizes.get(name, (1, 2))))
    e = spec_entry("mmlu_stem:mc::olmes", results)
    n = 16 * 2 + 4
    assert e["aggregation"] == "macro" and e["metric"] == "acc_raw"
    assert e["score"] == e["macro"] == pytest.approx((1 + 0 + 16 * 0.5) / 18)
    assert e["micro"] == pytest.approx((1 + 0 + 16) / n)
    assert (e["num_instances"], e["num_tasks"], len(e["members"])) == (n, 18, 18)
    assert "member_mean" not in e and "rrgs" not in e


def test_leaderboard_mmlu_and_bbh_headline_is_micro():
    # sizes differ by subject, so macro != micro
    results = results_for("mmlu::leaderboard", lambda name, i: stat(i % 3, 2 + i % 3))
    e = spec_entry("mmlu::leaderboard", results)
    assert e["aggregation"] == "micro" and e["score"] == e["micro"] != pytest.approx(e["macro"])
    assert set(e["members"]) == {"mmlu_stem::leaderboard", "mmlu_humanities::leaderboard",
                                 "mmlu_social_sciences::leaderboard", "mmlu_other::leaderboard"}
    assert all(m["aggregation"] == "micro" for m in e["members"].values())
    bbh = spec_entry("bbh:cot::lm_eval", results_for("bbh:cot::lm_eval", lambda n, i: stat(i % 2, 2 + i % 2)))
    assert bbh["aggregation"] == "micro" and bbh["score"] == bbh["micro"]


def slimpajama_results(subject_acc=lambda i: None):
    """ARC .5, HellaSwag .4, TruthfulQA .3, HumanEval .1; BIG-bench tasks .2 and .6
    alternating; MMLU subjects of 1..3 docs (or each at `subject_acc(i)` over 4 docs)."""
    fixed = {"arc_challenge::leaderboard": stat(5, 10), "hellaswag::leaderboard": stat(4, 10),
             "truthfulqa_mc2::leaderboard": stat(3, 10), "humaneval::greedy": stat(1, 10)}
    bb = {bigbench.spec(t): stat(1, 5) if k % 2 else stat(3, 5) for k, t in enumerate(bigbench.TASKS)}
    subjects = {}
    for i, s in enumerate(SUBJECTS):
        acc = subject_acc(i)
        subjects[f"mmlu_{s}::leaderboard"] = stat(int(acc * 4), 4) if acc is not None else stat(i % 2, 1 + i % 3)
    every = {**fixed, **bb, **subjects}
    return {name: TaskResult.of(task_config(name), every[name]) for name in every}


def test_slimpajama_table_average_counts_mmlu_once_and_rrgs():
    results = slimpajama_results()
    e = spec_entry("slimpajama_dc::leaderboard", results)
    subject_means = [results[f"mmlu_{s}::leaderboard"].stat.mean for s in SUBJECTS]
    mmlu_macro = math.fsum(subject_means) / 57
    bb_macro = (5 * 0.6 + 4 * 0.2) / 9      # tasks 0, 2, .. 8 at .6; 1, 3, 5, 7 at .2
    members = e["members"]
    assert list(members) == ["arc_challenge::leaderboard", "hellaswag::leaderboard",
                             "mmlu::leaderboard", "truthfulqa_mc2::leaderboard",
                             "bigbench::leaderboard", "humaneval::greedy"]
    # MMLU is the leaderboard's mean of 57 subject accuracies, not lm-eval's size-weighted one
    assert members["mmlu::leaderboard"]["aggregation"] == "macro"
    assert members["mmlu::leaderboard"]["score"] == pytest.approx(mmlu_macro)
    assert members["bigbench::leaderboard"]["score"] == pytest.approx(bb_macro)
    assert members["truthfulqa_mc2::leaderboard"]["metric"] == "mc2"
    assert members["humaneval::greedy"]["metric"] == "pass_at_1"
    average = (0.5 + 0.4 + mmlu_macro + 0.3 + bb_macro + 0.1) / 6
    assert e["aggregation"] == "member_mean" and e["metric"] == "mixed"
    assert e["score"] == e["member_mean"] == pytest.approx(average)
    assert e["rrgs"] == pytest.approx(1 - math.fsum(abs(m - 0.25) for m in subject_means) / 57)
    assert e["rrgs_subjects"] == 57 and e["num_tasks"] == 70
    assert "macro" not in e and "micro" not in e   # no mean over 70 incomparable leaves


@pytest.mark.parametrize("acc, expected", [(0.25, 1.0), (0.75, 0.5), (1.0, 0.25), (0.0, 0.75)])
def test_rrgs_by_hand(acc, expected):
    e = spec_entry("slimpajama_dc::leaderboard", slimpajama_results(lambda i: acc))
    assert e["rrgs"] == pytest.approx(expected)


def seed_results():
    def make(name, i):
        return stat(2, 4) if task_config(name).benchmark == "mmlu_stem" else stat(1, 4)
    results = results_for("data_attribution::olmo3", make)
    results["gsm8k::olmo3:n8:v2"] = TaskResult("pass_at_1", MeanStat.of([0.125, 0.5, 1.0]))
    return results


def test_mixed_seed_suite_reports_each_member_and_no_overall_mean():
    e = spec_entry("data_attribution::olmo3", seed_results())
    assert e["score"] is None and e["stderr"] is None and e["aggregation"] is None
    assert e["metric"] == "mixed"
    assert not {"macro", "micro", "member_mean", "rrgs"} & set(e)
    m = e["members"]
    assert list(m) == ["socialiqa:mc::xlarge", "mmlu_social_sciences:mc::olmes",
                       "mmlu_stem:mc::olmes", "gsm8k::olmo3:n8:v2"]
    assert (m["socialiqa:mc::xlarge"]["metric"], m["socialiqa:mc::xlarge"]["score"]) == ("acc_raw", 0.25)
    assert (m["mmlu_stem:mc::olmes"]["aggregation"], m["mmlu_stem:mc::olmes"]["score"]) == ("macro", 0.5)
    assert m["mmlu_social_sciences:mc::olmes"]["num_instances"] == 12 * 4
    assert m["gsm8k::olmo3:n8:v2"]["metric"] == "pass_at_1"
    assert m["gsm8k::olmo3:n8:v2"]["score"] == pytest.approx(0.625 / 3 + 1 / 3)
    assert e["num_instances"] == 4 + 12 * 4 + 18 * 4 + 3


def test_primary_scores_honours_each_suite_primary_and_prints_the_table():
    results = {**slimpajama_results(), **seed_results()}
    specs = ["mmlu::leaderboard", "mmlu_stem:mc::olmes", "slimpajama_dc::leaderboard",
             "data_attribution::olmo3", "humaneval::greedy"]
    tasks, primary = {}, {}
    for spec in specs:
        for name in leaf_specs(spec):
            [task] = resolve(name)
            tasks[name], primary[name] = TaskRun(task, instances=[]), results[name].stat
    plan = Plan(specs=[SpecPlan(s, leaf_specs(s), is_suite=leaf_specs(s) != [s]) for s in specs],
                tasks=tasks)
    typed = primary_scores(plan, ScoredPlan({}, primary))
    scores = {spec: s.to_dict() for spec, s in typed.items()}
    assert scores["mmlu::leaderboard"]["score"] == scores["mmlu::leaderboard"]["micro"]
    assert scores["mmlu_stem:mc::olmes"]["score"] == scores["mmlu_stem:mc::olmes"]["macro"]
    table, expected = scores["slimpajama_dc::leaderboard"], spec_entry("slimpajama_dc::leaderboard", results)
    assert (table["score"], table["rrgs"]) == (expected["member_mean"], expected["rrgs"])
    assert scores["data_attribution::olmo3"]["score"] is None
    assert scores["humaneval::greedy"] == {"metric": "pass_at_1", "score": 0.1,
                                           "stderr": pytest.approx(0.1), "num_instances": 10}

    out = io.StringIO()
    print_results(typed, [], Console(file=out, width=200))
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.getvalue().splitlines()
            if line.startswith("│")]
    assert ["mmlu::leaderboard", "micro(acc_raw)"] in [r[:2] for r in rows]    # its own headline
    assert ["mmlu::leaderboard", "macro(acc_raw)"] in [r[:2] for r in rows]    # the table's member
    table = scores["slimpajama_dc::leaderboard"]
    assert ["slimpajama_dc::leaderboard", "member_mean(mixed)", f"{table['score']:.4f}"] in [r[:3] for r in rows]
    assert ["rrgs", "", f"{table['rrgs']:.4f}"] in [r[:3] for r in rows]
    seed = next(r for r in rows if r[0] == "data_attribution::olmo3")
    assert seed[1:3] == ["each member's", "—"]
    assert ["gsm8k::olmo3:n8:v2", "pass_at_1"] in [r[:2] for r in rows]
    assert ["mmlu_social_sciences:mc::olmes", "macro(acc_raw)"] in [r[:2] for r in rows]
