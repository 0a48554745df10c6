"""The headline entry of each spec a user asked for, from its leaf tasks' primary scores.

A task reports its primary metric. A suite reports the aggregations it declares
(`proctor.tasks.suite.AGGREGATIONS`), its `primary` one as `score`, and each direct
member's own score; a suite without a primary (incomparable members) has `score` None.
Pure: no I/O, no model; the inputs are each leaf task's primary `MeanStat` (or `RatioStat`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

from proctor.metrics.aggregate import Stat, suite_scores
from proctor.metrics.rrgs import rrgs
from proctor.tasks import mmlu
from proctor.tasks.base import TaskConfig
from proctor.tasks.registry import leaf_specs, suite
from proctor.tasks.suite import Suite

#: the keys of a member's entry inside its suite's `members`
MEMBER_KEYS = ("metric", "aggregation", "score", "stderr", "num_instances")


@dataclass(frozen=True)
class TaskResult:
    """What a suite needs of one scored leaf task."""

    metric: str                          # the task's primary metric
    stat: Stat                           # its per-doc values (or corpus ratio), as sufficient statistics
    mmlu_subject: Optional[str] = None   # set when the task is one MMLU subject (for RRGS)

    @classmethod
    def of(cls, config: TaskConfig, stat: Stat) -> "TaskResult":
        """Build a task's result from its config and its primary metric's statistics."""
        subject = config.subject if config.dataset_path == mmlu.DATASET else None
        return cls(config.primary_metric, stat, subject)


def task_entry(result: TaskResult) -> dict:
    """Return a task's entry: its primary metric's name, mean, stderr and document count."""
    return {"metric": result.metric, "score": result.stat.mean, "stderr": result.stat.stderr,
            "num_instances": result.stat.count}


def _pick(entry: dict, aggregation: str) -> dict:
    """Return a suite entry headlined by another of its aggregations."""
    if aggregation not in entry:
        raise ValueError(f"no {aggregation!r} among the aggregations of {sorted(entry)}")
    return {**entry, "aggregation": aggregation, "score": entry[aggregation],
            "stderr": entry.get(f"{aggregation}_stderr")}


def best_of_mc_rc(members: Mapping[str, dict]) -> tuple[Optional[float], Optional[float]]:
    """Return OLMES's `mc_or_rc`: the larger of the members' scores, with that member's stderr.

    As in allenai/olmes oe_eval/tasks/aggregate_tasks.py (`calculate_task_group_metrics`),
    members are compared in member order [MC, RC] with a strict `>`, so a tie goes to MC.
    """
    best: Optional[dict] = None
    for entry in members.values():
        if entry["score"] is not None and (best is None or entry["score"] > best["score"]):
            best = entry
    return (None, None) if best is None else (best["score"], best["stderr"])


def size_weighted(members: Mapping[str, dict]) -> tuple[float, float]:
    """Return lm-eval's size-weighted group score and its pooled standard error.

    As lm-eval's `aggregate_subtask_metrics(weight_by_size=True)` and `pooled_sample_stderr`
    (lm_eval/api/metrics.py): the members' within-member variances pooled, the spread between
    the members' means left out.
    """
    sizes = [m["num_instances"] for m in members.values()]
    total = sum(sizes)
    score = math.fsum(m["score"] * n for m, n in zip(members.values(), sizes)) / total
    pooled_var = math.fsum((n - 1) * m["stderr"] ** 2 * n for m, n in zip(members.values(), sizes)) / (total - len(sizes))
    return score, math.sqrt(pooled_var / total)


def suite_entry(s: Suite, results: Mapping[str, TaskResult]) -> dict:
    """Return a suite's aggregations, headline score and members (each scored as the suite says)."""
    leaves = [results[name] for name in leaf_specs(s.name)]
    metrics = {r.metric for r in leaves}
    out: dict = {"metric": metrics.pop() if len(metrics) == 1 else "mixed", "aggregation": s.primary}
    members = {}
    for name in s.members:
        sub = suite(name)
        if sub is None:
            members[name] = task_entry(results[name])
            continue
        entry = suite_entry(sub, results)
        wanted = s.aggregation_of(name)
        members[name] = _pick(entry, wanted) if wanted else entry
    if {"macro", "micro"} & set(s.aggregations):
        pooled = suite_scores([r.stat for r in leaves])
        for agg in ("macro", "micro"):
            if agg in s.aggregations:
                out[agg], out[f"{agg}_stderr"] = pooled[agg], pooled[f"{agg}_stderr"]
    if "member_mean" in s.aggregations:
        scores = [m["score"] for m in members.values()]
        out["member_mean"] = math.fsum(scores) / len(scores)
        # members are scored on different documents: independent errors
        out["member_mean_stderr"] = math.sqrt(math.fsum(m["stderr"] ** 2 for m in members.values())) / len(scores)
    if "size_weighted" in s.aggregations:
        out["size_weighted"], out["size_weighted_stderr"] = size_weighted(members)
    if "mc_or_rc" in s.aggregations:
        out["mc_or_rc"], out["mc_or_rc_stderr"] = best_of_mc_rc(members)
    if "rrgs" in s.aggregations:
        subjects = {r.mmlu_subject: r.stat.mean for r in leaves if r.mmlu_subject}
        out["rrgs"] = rrgs(subjects)
        out["rrgs_subjects"] = len(subjects)
    out["score"] = out[s.primary] if s.primary else None
    out["stderr"] = out.get(f"{s.primary}_stderr") if s.primary else None
    out["num_instances"] = sum(r.stat.count for r in leaves)
    out["num_tasks"] = len(leaves)
    out["members"] = {name: {k: m.get(k) for k in MEMBER_KEYS} for name, m in members.items()}
    return out


def spec_entry(spec: str, results: Mapping[str, TaskResult]) -> dict:
    """Return the headline entry of a task or suite spec (as `primary_scores` in metrics.json)."""
    s = suite(spec)
    return task_entry(results[spec]) if s is None else suite_entry(s, results)
