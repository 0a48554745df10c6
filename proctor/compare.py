"""Two runs of the same specs, item by item: agreement and a paired comparison.

Runs are read through `proctor.read_run`; documents are joined on `query_id`. For each task
both runs scored: how many predictions are identical, the largest |Δ sum_logits| over every
choice, and the paired difference B − A of the primary metric per document
(`proctor.metrics.stats.paired_difference`): its clustered standard error and 95% intervals
(analytic, and a paired cluster bootstrap with a fixed seed), a p-value (exact McNemar for
0/1 metrics without clusters, else a Wald test on the clustered error), the minimum
detectable effect at 80% power, and Holm-adjusted p-values across the tasks compared.
Each requested suite whose headline is a macro or micro mean gets the same row, its
documents stratified by task and weighted as the suite weighs them. The paired unit is the
document: the n samples of one question enter as its pass@1, so they are one cluster.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Hashable, Optional, Sequence

from proctor.errors import UserError
from proctor.metrics.clusters import declares_clusters, paired_units
from proctor.metrics.stats import PairedDifference, holm, paired_difference
from proctor.outputs.owned import OWNED_MARK
from proctor.outputs.records import RunRecord, TaskRecord
from proctor.outputs.run_dir import read_run

#: bootstrap replicates and seed of every comparison (fixed: the same runs give the same intervals)
BOOTSTRAP = 10_000
SEED = 0


@dataclass(frozen=True)
class TaskComparison:
    """One task's (or suite's) comparison of B against A; `to_dict` gives `--json`'s keys."""

    task: str                          # the task or suite spec
    kind: str                          # "task" or "suite"
    metric: str                        # the primary metric (a suite: its members', or "mixed")
    n: int                             # documents scored in both runs
    only_a: int                        # documents in one run only
    only_b: int
    identical: int                     # identical predictions (choice index, or generated texts)
    max_abs_delta_sum_logits: Optional[float]   # choice and perplexity tasks: over every choice
    a_score: float                     # the primary metric over the joined documents
    b_score: float
    diff: float                        # b_score − a_score
    stderr: float                      # of diff, clustered
    diff_ci95: tuple[float, float]     # diff ∓ 1.96 stderr
    diff_ci95_bootstrap: tuple[float, float]   # paired cluster bootstrap, percentile
    test: str                          # "mcnemar_exact" or "wald_clustered"
    p_value: float
    p_holm: Optional[float]            # Holm-adjusted across the tasks (suites: across the suites)
    mde80: float                       # the smallest |diff| this n detects with 80% power at α = .05
    a_only: Optional[int]              # 0/1 metrics: documents right in A only, in B only
    b_only: Optional[int]
    clusters: int                      # independent clusters behind stderr
    cluster_by: Optional[str]          # the sidecar column documents were clustered by

    def to_dict(self) -> dict:
        """Return the comparison as `--json` writes it (the intervals as lists)."""
        out = asdict(self)
        out["diff_ci95"], out["diff_ci95_bootstrap"] = list(self.diff_ci95), list(self.diff_ci95_bootstrap)
        return out


@dataclass(frozen=True)
class _Paired:
    """One task's joined documents, before the statistics."""

    task: TaskRecord
    ids: list[str]
    a: list[float]
    b: list[float]
    clusters: list[Hashable]
    only_a: int
    only_b: int
    identical: int
    max_delta: Optional[float]


def _join(a: TaskRecord, b: TaskRecord, cluster_by: Optional[str]) -> _Paired:
    metric = a.primary_metric
    records_a = {r.query_id: r for r in a.records}
    records_b = {r.query_id: r for r in b.records}
    shared = [q for q in records_a if q in records_b]
    if not shared:
        raise UserError(f"{a.name}: the two runs share no query_id; compare runs of the same spec and data")
    identical = sum(records_a[q].prediction(metric) == records_b[q].prediction(metric) for q in shared)
    deltas = [abs(x - y) for q in shared for x, y in zip(records_a[q].sum_logits(), records_b[q].sum_logits())]
    ids, values_a, values_b, clusters = paired_units(a, b, cluster_by)
    if not ids:
        raise UserError(f"{a.name}: no document has a {metric} in both runs")
    return _Paired(a, ids, values_a, values_b, clusters, len(records_a) - len(shared), len(records_b) - len(shared),
                   identical, max(deltas) if deltas else None)


def _row(name: str, kind: str, metric: str, parts: Sequence[_Paired], stats: PairedDifference,
         cluster_by: Optional[str]) -> TaskComparison:
    deltas = [p.max_delta for p in parts if p.max_delta is not None]
    return TaskComparison(
        task=name, kind=kind, metric=metric, n=stats.n, only_a=sum(p.only_a for p in parts),
        only_b=sum(p.only_b for p in parts), identical=sum(p.identical for p in parts),
        max_abs_delta_sum_logits=max(deltas) if deltas else None, a_score=stats.a_score, b_score=stats.b_score,
        diff=stats.diff, stderr=stats.stderr, diff_ci95=stats.diff_ci95,
        diff_ci95_bootstrap=stats.diff_ci95_bootstrap, test=stats.test, p_value=stats.p_value, p_holm=None,
        mde80=stats.mde80, a_only=stats.a_only, b_only=stats.b_only, clusters=stats.clusters,
        cluster_by=cluster_by)


def _task_row(p: _Paired, cluster_by: Optional[str]) -> TaskComparison:
    clustered = cluster_by is not None or declares_clusters(p.task)   # else each document is its own cluster
    stats = paired_difference(p.a, p.b, p.clusters if clustered else None, bootstrap=BOOTSTRAP, seed=SEED)
    return _row(p.task.name, "task", p.task.primary_metric, [p], stats,
                cluster_by or ("cluster" if clustered else None))


def _suite_rows(run_a: RunRecord, run_b: RunRecord, joined: dict[str, _Paired],
                cluster_by: Optional[str]) -> list[TaskComparison]:
    """Build a row per requested suite headlined by a macro or micro mean over its leaf tasks."""
    from proctor.tasks.registry import leaf_specs, suite

    rows = []
    for spec, score in run_a.primary_scores.items():
        s = suite(spec) if score.is_suite and spec in run_b.primary_scores else None
        if s is None or s.primary not in ("macro", "micro", "size_weighted"):  # size_weighted: micro
            continue  # a task, or a suite headlined otherwise (best of MC/RC, RRGS, none)
        leaves = leaf_specs(spec)
        if not all(leaf in joined for leaf in leaves):
            continue
        parts = [joined[leaf] for leaf in leaves]
        a, b = [v for p in parts for v in p.a], [v for p in parts for v in p.b]
        macro = s.primary == "macro"
        declared = cluster_by is None and any(declares_clusters(p.task) for p in parts)
        if cluster_by is None:   # each task a stratum, holding the clusters it declares
            strata = [leaf for leaf, p in zip(leaves, parts) for _ in p.ids]
            clusters = [c for p in parts for c in p.clusters] if declared else None
            stats = paired_difference(a, b, clusters, strata=strata, macro=macro, bootstrap=BOOTSTRAP, seed=SEED)
        else:   # clusters may span tasks (a subject's questions): every document weighted as the suite weighs it
            weights = [1 / (len(parts) * len(p.ids)) if macro else 1.0 for p in parts for _ in p.ids]
            stats = paired_difference(a, b, [c for p in parts for c in p.clusters], weights=weights,
                                      bootstrap=BOOTSTRAP, seed=SEED)
        rows.append(_row(spec, "suite", score.metric, parts, stats, cluster_by or ("cluster" if declared else None)))
    return rows


def _with_holm(rows: list[TaskComparison]) -> list[TaskComparison]:
    adjusted = holm([None if math.isnan(r.p_value) else r.p_value for r in rows])
    return [replace(r, p_holm=p) for r, p in zip(rows, adjusted)]


def compare_runs(dir_a: Path, dir_b: Path, cluster_by: Optional[str] = None, *,
                 allow_edited: bool = False) -> list[TaskComparison]:
    """Return the comparison of every task both runs scored, then of every requested suite.

    UserError when they share none, or when either is not a run directory this proctor
    reads (`proctor.read_run`, `allow_edited` as there). `cluster_by`: a sidecar column
    (`CLUSTER_COLUMNS`).
    """
    return compare_records(read_run(dir_a, allow_edited=allow_edited), read_run(dir_b, allow_edited=allow_edited),
                           cluster_by, names=(str(dir_a), str(dir_b)))


def compare_records(run_a: RunRecord, run_b: RunRecord, cluster_by: Optional[str] = None,
                    names: tuple[str, str] = ("A", "B")) -> list[TaskComparison]:
    """Compare two runs already read, as `compare_runs` does; `names` name them in errors."""
    shared = [t for t in run_a.tasks if t in run_b.tasks]
    if not shared:
        raise UserError(f"{names[0]} and {names[1]} scored no task in common; run the same specs on both")
    joined = {t: _join(run_a.tasks[t], run_b.tasks[t], cluster_by) for t in shared}
    tasks = [_task_row(p, cluster_by) for p in joined.values()]
    return _with_holm(tasks) + _with_holm(_suite_rows(run_a, run_b, joined, cluster_by))


def comparison_json(rows: Sequence[TaskComparison], run_a: str, run_b: str, cluster_by: Optional[str]) -> dict:
    """`proctor compare --json`: the two runs, the settings, and one entry per task and suite.

    `written_by` holds `OWNED_MARK`, which `write_owned_file` fills with the file's digest:
    the file says itself that proctor wrote it, with no manifest beside it.
    """
    return {"run_a": run_a, "run_b": run_b, "cluster_by": cluster_by, "bootstrap_replicates": BOOTSTRAP,
            "bootstrap_seed": SEED, "comparisons": [r.to_dict() for r in rows],
            "written_by": OWNED_MARK}   # last: the file's own proof that proctor wrote it, unchanged
