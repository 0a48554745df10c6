"""Aggregates from per-doc metrics, kept as sufficient statistics so they merge exactly."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, Union


@dataclass(frozen=True)
class MeanStat:
    """Count, sum and sum of squares of one metric: enough for its mean and standard error."""

    count: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> "MeanStat":
        """Summarise per-doc values, summed with fsum (correctly rounded, whatever their order)."""
        values = [float(v) for v in values]
        return cls(len(values), math.fsum(values), math.fsum(v * v for v in values))

    def merge(self, other: "MeanStat") -> "MeanStat":
        """Return the statistics of both sets of values together."""
        return MeanStat(self.count + other.count, self.total + other.total, self.total_sq + other.total_sq)

    @property
    def mean(self) -> float:
        """Mean of the values; nan with none."""
        return self.total / self.count if self.count else float("nan")

    @property
    def stderr(self) -> float:
        """Standard error of the mean with the sample (n-1) variance, as lm-eval reports it."""
        if self.count < 2:
            return float("nan")
        variance = max(self.total_sq - self.count * self.mean**2, 0.0) / (self.count - 1)
        return math.sqrt(variance / self.count)


@dataclass(frozen=True)
class RatioStat:
    """A corpus ratio sum(y) / sum(x) over docs (e.g. NLL over bytes), as sufficient statistics.

    `mean` is the ratio of totals (not a mean of per-doc ratios); `count` the docs in it.
    `stderr` is the delta-method (ratio-estimator) standard error over docs,
    sqrt(sum((y_i - R x_i)^2) / (n (n - 1))) / mean(x), from sums of squares and products
    so it merges exactly; nan under two docs.
    """

    count: int = 0
    numerator: float = 0.0       # sum of y
    denominator: float = 0.0     # sum of x
    numerator_sq: float = 0.0    # sum of y^2
    denominator_sq: float = 0.0  # sum of x^2
    cross: float = 0.0           # sum of x*y

    @classmethod
    def of(cls, pairs: Iterable[tuple[float, float]]) -> "RatioStat":
        """From (y, x) per doc."""
        pairs = [(float(y), float(x)) for y, x in pairs]
        return cls(
            len(pairs),
            math.fsum(y for y, _ in pairs), math.fsum(x for _, x in pairs),
            math.fsum(y * y for y, _ in pairs), math.fsum(x * x for _, x in pairs),
            math.fsum(x * y for y, x in pairs),
        )

    def merge(self, other: "RatioStat") -> "RatioStat":
        """Return the statistics of both sets of docs together."""
        return RatioStat(
            self.count + other.count, self.numerator + other.numerator, self.denominator + other.denominator,
            self.numerator_sq + other.numerator_sq, self.denominator_sq + other.denominator_sq,
            self.cross + other.cross,
        )

    @property
    def mean(self) -> float:
        """The ratio of totals, sum(y) / sum(x); nan when sum(x) is 0."""
        return self.numerator / self.denominator if self.denominator else float("nan")

    @property
    def stderr(self) -> float:
        """Delta-method standard error of the ratio (see the class docstring); nan under two docs."""
        if self.count < 2 or not self.denominator:
            return float("nan")
        r = self.mean
        residual = max(self.numerator_sq - 2 * r * self.cross + r * r * self.denominator_sq, 0.0)
        return math.sqrt(residual / (self.count * (self.count - 1))) / (self.denominator / self.count)


@dataclass(frozen=True)
class CorpusStat:
    """An aggregate computed by someone else's rule over all docs at once (lm-eval's bleu, f1, mcc).

    It holds only the value, its standard error and the docs it covers: it cannot be merged
    with another task's, so a suite that pools docs refuses it.
    """

    count: int
    mean: float
    stderr: float


#: what a task's aggregate metric can be: a mean over docs, a corpus ratio, or a corpus-level value
Stat = Union[MeanStat, RatioStat, CorpusStat]


def aggregate_docs(doc_metrics: Sequence[Mapping[str, float]], names: Sequence[str]) -> dict[str, MeanStat]:
    """Plain mean over docs of each named metric present in every doc."""
    return {
        name: MeanStat.of(m[name] for m in doc_metrics)
        for name in names
        if doc_metrics and all(name in m for m in doc_metrics)
    }


def suite_scores(task_stats: Sequence[Stat]) -> dict[str, float]:
    """Suite `macro` (unweighted mean of task means) and `micro` (mean over all docs), with stderrs."""
    means = [s.mean for s in task_stats]
    pooled = MeanStat()
    for s in task_stats:
        if not isinstance(s, MeanStat):  # e.g. Paloma sources: byte-weighted, not a mean of members
            raise ValueError("a suite pools per-doc means; a corpus-level value (RatioStat, CorpusStat) "
                             "cannot be a member")
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
