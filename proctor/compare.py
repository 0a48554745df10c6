"""Per-item agreement between two run directories of the same specs (e.g. two backends).

Runs are read through `proctor.read_run`; items are joined on `query_id`. For each task:
how many predictions are identical, the largest |Δ sum_logits| over every choice (choice
and perplexity tasks), each run's primary score over the joined items, and a paired test
of the per-item primary metric (perplexity: each document's bits per byte): the exact
McNemar test when it is 0/1 (accuracy, exact match, pass@1 of one sample), else a paired
t-test.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from proctor.errors import UserError
from proctor.outputs.records import TaskRecord
from proctor.outputs.run_dir import read_run


@dataclass
class TaskAgreement:
    task: str
    metric: str                       # the task's primary metric
    n: int                            # items in both runs
    only_a: int                       # items in one run only
    only_b: int
    identical: int                    # identical predictions (choice index, or generated texts)
    max_abs_delta_sum_logits: Optional[float]   # choice tasks: over every choice of every item
    score_a: float                    # primary metric, mean over the joined items
    score_b: float
    a_only_correct: int               # binary metrics: items right in A and wrong in B
    b_only_correct: int
    test: str                         # "mcnemar_exact" or "paired_t"
    p_value: Optional[float]

    def to_dict(self) -> dict:
        return asdict(self)


def _paired_test(a: list[float], b: list[float]) -> tuple[str, Optional[float], int, int]:
    from scipy import stats

    if all(v in (0.0, 1.0) for v in (*a, *b)):
        a_only = sum(1 for x, y in zip(a, b) if x > y)
        b_only = sum(1 for x, y in zip(a, b) if y > x)
        p = stats.binomtest(a_only, a_only + b_only).pvalue if a_only + b_only else 1.0
        return "mcnemar_exact", float(p), a_only, b_only
    diffs = [x - y for x, y in zip(a, b)]
    if len(diffs) < 2 or all(d == diffs[0] for d in diffs):
        return "paired_t", (1.0 if all(d == 0 for d in diffs) else None), 0, 0
    return "paired_t", float(stats.ttest_rel(a, b).pvalue), 0, 0


def compare_task(a: TaskRecord, b: TaskRecord) -> TaskAgreement:
    metric = a.primary_metric
    records_a = {r.query_id: r for r in a.records}
    records_b = {r.query_id: r for r in b.records}
    shared = [q for q in records_a if q in records_b]
    if not shared:
        raise UserError(f"{a.name}: the two runs share no query_id; compare runs of the same spec and data")
    identical = sum(records_a[q].prediction(metric) == records_b[q].prediction(metric) for q in shared)
    deltas = [abs(x - y) for q in shared
              for x, y in zip(records_a[q].sum_logits(), records_b[q].sum_logits())]
    values_a, values_b = [], []
    for q in shared:  # perplexity documents without tokens have no value
        x, y = records_a[q].metric_value(metric), records_b[q].metric_value(metric)
        if x is not None and y is not None:
            values_a.append(float(x))
            values_b.append(float(y))
    test, p, a_only, b_only = _paired_test(values_a, values_b)
    return TaskAgreement(
        task=a.name, metric=metric, n=len(shared), only_a=len(records_a) - len(shared),
        only_b=len(records_b) - len(shared), identical=identical,
        max_abs_delta_sum_logits=max(deltas) if deltas else None,
        score_a=math.fsum(values_a) / len(values_a) if values_a else math.nan,
        score_b=math.fsum(values_b) / len(values_b) if values_b else math.nan,
        a_only_correct=a_only, b_only_correct=b_only, test=test, p_value=p)


def compare_runs(dir_a: Path, dir_b: Path) -> list[TaskAgreement]:
    """Agreement for every task both runs scored (UserError when they share none, or when
    either is not a run directory this proctor reads: `proctor.read_run`)."""
    run_a, run_b = read_run(dir_a), read_run(dir_b)
    shared = [t for t in run_a.tasks if t in run_b.tasks]
    if not shared:
        raise UserError(f"{dir_a} and {dir_b} scored no task in common; run the same specs on both")
    return [compare_task(run_a.tasks[t], run_b.tasks[t]) for t in shared]
