"""Aggregates from per-doc metrics, kept as sufficient statistics so they merge exactly."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class MeanStat:
    """Count, sum and sum of squares of one metric: enough for its mean and standard error."""

    count: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> "MeanStat":
        values = [float(v) for v in values]
        return cls(len(values), math.fsum(values), math.fsum(v * v for v in values))

    def merge(self, other: "MeanStat") -> "MeanStat":
        return MeanStat(self.count + other.count, self.total + other.total, self.total_sq + other.total_sq)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    @property
    def stderr(self) -> float:
        """Standard error of the mean with the sample (n-1) variance, as lm-eval reports it."""
        if self.count < 2:
            return float("nan")
        variance = max(self.total_sq - self.count * self.mean**2, 0.0) / (self.count - 1)
        return math.sqrt(variance / self.count)


def aggregate_docs(doc_metrics: Sequence[Mapping[str, float]], names: Sequence[str]) -> dict[str, MeanStat]:
    """Plain mean over docs of each named metric present in every doc."""
    return {
        name: MeanStat.of(m[name] for m in doc_metrics)
        for name in names
        if doc_metrics and all(name in m for m in doc_metrics)
    }


def suite_scores(task_stats: Sequence[MeanStat]) -> dict[str, float]:
    """Suite `macro` (unweighted mean of task means) and `micro` (mean over all docs), with stderrs."""
    means = [s.mean for s in task_stats]
    pooled = MeanStat()
    for s in task_stats:
        pooled = pooled.merge(s)
    macro_se = math.sqrt(math.fsum(s.stderr**2 for s in task_stats)) / len(task_stats)
    return {
        "macro": math.fsum(means) / len(means),
        "macro_stderr": macro_se,
        "micro": pooled.mean,
        "micro_stderr": pooled.stderr,
        "num_instances": pooled.count,
        "num_tasks": len(task_stats),
    }
