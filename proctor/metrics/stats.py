"""Error bars for evals: cluster-robust standard errors, paired model differences, multiple-comparison control.

Eval items are often not independent (the samples of one question, the questions of one passage), so standard
errors are clustered (CR1) and two models are compared through their per-item differences (Miller 2024,
"Adding Error Bars to Evals", arXiv 2411.00640).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Optional, Sequence

import numpy as np

Z95: float = 1.959963984540054  # scipy.stats.norm.ppf(0.975)
Z80: float = 0.8416212335729143  # scipy.stats.norm.ppf(0.80)

# Bound on the bootstrap's index matrix per chunk (replicates x clusters), to keep memory flat.
_MAX_INDEX_ENTRIES = 2_000_000

_NAN = float("nan")


@dataclass(frozen=True)
class ClusteredMean:
    """A mean with its naive and its cluster-robust (CR1) standard error, over n units in `clusters` clusters."""

    mean: float
    stderr_naive: float
    stderr_clustered: float
    n: int
    clusters: int


@dataclass(frozen=True)
class PairedDifference:
    """Difference b - a of two models on the same units, with its error bars, CIs, test and p-value."""

    n: int
    clusters: int
    a_score: float
    b_score: float
    diff: float
    stderr: float
    diff_ci95: tuple[float, float]
    diff_ci95_bootstrap: tuple[float, float]
    p_value: float
    test: str
    mde80: float
    a_only: Optional[int]
    b_only: Optional[int]


def _codes(keys: Sequence[Hashable]) -> tuple[np.ndarray, int]:
    """Dense integer codes 0..G-1 for the keys, in order of first appearance."""
    index: dict[Hashable, int] = {}
    codes = np.fromiter((index.setdefault(key, len(index)) for key in keys), dtype=np.intp, count=len(keys))
    return codes, len(index)


def _vector(values: Sequence[float], name: str) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of numbers, got shape {x.shape}")
    return x


def _cr1(x: np.ndarray, codes: np.ndarray, groups: int) -> float:
    """CR1 cluster-robust standard error of the mean of x; nan under 2 clusters."""
    if groups < 2:
        return _NAN
    resid = np.bincount(codes, weights=x - x.mean(), minlength=groups)
    return math.sqrt(groups / (groups - 1) * float(resid @ resid)) / x.size


def clustered_mean(values: Sequence[float], clusters: Optional[Sequence[Hashable]] = None) -> ClusteredMean:
    """Mean with the naive and the cluster-robust standard error; clusters=None makes every unit its own cluster."""
    x = _vector(values, "values")
    n = x.size
    if clusters is None:
        codes, groups = np.arange(n), n
    else:
        if len(clusters) != n:
            raise ValueError(f"clusters has {len(clusters)} entries for {n} values")
        codes, groups = _codes(clusters)
    mean = float(x.mean()) if n else _NAN
    naive = math.sqrt(float(x.var(ddof=1)) / n) if n >= 2 else _NAN
    return ClusteredMean(mean, naive, _cr1(x, codes, groups), n, groups)


def holm(p_values: Sequence[Optional[float]]) -> list[Optional[float]]:
    """Holm-Bonferroni step-down adjusted p-values; None entries pass through and do not count towards m."""
    present = sorted(((p, i) for i, p in enumerate(p_values) if p is not None), key=lambda pair: pair[0])
    m = len(present)
    adjusted: list[Optional[float]] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def _binary(x: np.ndarray) -> bool:
    return bool(np.all((x == 0) | (x == 1)))


def _discordant(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    return int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> tuple[int, int, float]:
    """Exact McNemar test on paired 0/1 outcomes: (right in a only, right in b only, two-sided p)."""
    x, y = _vector(a, "a"), _vector(b, "b")
    if x.size != y.size:
        raise ValueError(f"a has {x.size} values and b has {y.size}")
    if not (_binary(x) and _binary(y)):
        raise ValueError("mcnemar_exact needs 0/1 outcomes")
    a_only, b_only = _discordant(x, y)
    return a_only, b_only, _mcnemar_p(a_only, b_only)


def _mcnemar_p(a_only: int, b_only: int) -> float:
    if a_only + b_only == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(a_only, a_only + b_only, 0.5).pvalue)


def _wald_p(diff: float, stderr: float) -> float:
    if math.isnan(diff) or math.isnan(stderr):
        return _NAN
    if stderr == 0:
        return 1.0 if diff == 0 else 0.0
    from scipy.stats import norm

    return float(2 * norm.sf(abs(diff) / stderr))


@dataclass(frozen=True)
class _Stratum:
    weight: float
    a_mean: float
    b_mean: float
    diff: float
    stderr: float
    cluster_sums: np.ndarray  # per cluster: sum of the differences
    cluster_sizes: np.ndarray  # per cluster: number of units (float)


def _stratum(a: np.ndarray, b: np.ndarray, cluster_codes: np.ndarray, weight: float) -> _Stratum:
    ids, codes = np.unique(cluster_codes, return_inverse=True)  # renumber this stratum's clusters 0..G_s-1
    groups = ids.size
    d = b - a
    sums = np.bincount(codes, weights=d, minlength=groups)
    sizes = np.bincount(codes, minlength=groups).astype(float)
    return _Stratum(weight, float(a.mean()), float(b.mean()), float(d.mean()), _cr1(d, codes, groups), sums, sizes)


def _bootstrap(strata: list[_Stratum], replicates: int, seed: int) -> tuple[float, float]:
    """Percentile interval of the weighted mean difference under resampling clusters within each stratum."""
    if replicates == 0 or any(s.cluster_sums.size < 2 for s in strata):
        return _NAN, _NAN
    rng = np.random.default_rng(seed)
    estimates = np.zeros(replicates)
    for s in strata:
        groups = s.cluster_sums.size
        equal_sizes = bool(np.all(s.cluster_sizes == s.cluster_sizes[0]))
        step = max(1, _MAX_INDEX_ENTRIES // groups)
        for start in range(0, replicates, step):
            stop = min(start + step, replicates)
            idx = rng.integers(0, groups, size=(stop - start, groups))
            totals = s.cluster_sums[idx].sum(axis=1)
            # With equal cluster sizes the resampled unit count is fixed; skip the second gather.
            counts = s.cluster_sizes[0] * groups if equal_sizes else s.cluster_sizes[idx].sum(axis=1)
            estimates[start:stop] += s.weight * totals / counts
    low, high = np.percentile(estimates, [2.5, 97.5])
    return float(low), float(high)


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    clusters: Optional[Sequence[Hashable]] = None,
    *,
    strata: Optional[Sequence[Hashable]] = None,
    macro: bool = False,
    weights: Optional[Sequence[float]] = None,
    bootstrap: int = 10_000,
    seed: int = 0,
) -> PairedDifference:
    """Difference b - a of two models scored on the same units, with clustered paired error bars.

    Strata (the tasks of a suite) each get their own mean difference and variance; macro weights every stratum
    equally, micro (the default) every unit. Cluster ids are only meaningful within their stratum.
    `weights` (instead of strata: clusters that cross tasks, e.g. MMLU subjects over a suite's tasks) makes the
    difference a weighted mean over units, its error the weighted CR1 and its bootstrap a weighted ratio.
    """
    if weights is not None:
        if strata is not None:
            raise ValueError("give strata or weights, not both")
        return _weighted_difference(a, b, clusters, weights, bootstrap, seed)
    x, y = _vector(a, "a"), _vector(b, "b")
    n = x.size
    if y.size != n:
        raise ValueError(f"a has {n} values and b has {y.size}")
    if n == 0:
        raise ValueError("paired_difference needs at least one paired unit")
    if clusters is not None and len(clusters) != n:
        raise ValueError(f"clusters has {len(clusters)} entries for {n} paired units")
    if strata is not None and len(strata) != n:
        raise ValueError(f"strata has {len(strata)} entries for {n} paired units")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0, got {bootstrap}")

    stratum_codes, n_strata = _codes(strata) if strata is not None else (np.zeros(n, dtype=np.intp), 1)
    if clusters is None:
        cluster_codes, n_clusters = np.arange(n), n
    else:
        keys = clusters if strata is None else list(zip(strata, clusters))
        cluster_codes, n_clusters = _codes(keys)

    parts = []
    for s in range(n_strata):
        mask = stratum_codes == s
        n_s = int(mask.sum())
        weight = 1 / n_strata if macro else n_s / n
        parts.append(_stratum(x[mask], y[mask], cluster_codes[mask], weight))

    a_score = math.fsum(p.weight * p.a_mean for p in parts)
    b_score = math.fsum(p.weight * p.b_mean for p in parts)
    diff = math.fsum(p.weight * p.diff for p in parts)
    stderr = math.sqrt(math.fsum((p.weight * p.stderr) ** 2 for p in parts))

    binary = _binary(x) and _binary(y)
    a_only, b_only = _discordant(x, y) if binary else (None, None)
    if a_only is not None and b_only is not None and clusters is None and strata is None:
        test = "mcnemar_exact"
        p_value = _mcnemar_p(a_only, b_only)
    else:
        test = "wald_clustered"
        p_value = _wald_p(diff, stderr)

    return PairedDifference(
        n=n,
        clusters=n_clusters,
        a_score=a_score,
        b_score=b_score,
        diff=diff,
        stderr=stderr,
        diff_ci95=(diff - Z95 * stderr, diff + Z95 * stderr),
        diff_ci95_bootstrap=_bootstrap(parts, bootstrap, seed),
        p_value=p_value,
        test=test,
        mde80=(Z95 + Z80) * stderr,
        a_only=a_only,
        b_only=b_only,
    )


def _weighted_difference(a: Sequence[float], b: Sequence[float], clusters: Optional[Sequence[Hashable]],
                         weights: Sequence[float], bootstrap: int, seed: int) -> PairedDifference:
    x, y, w = _vector(a, "a"), _vector(b, "b"), _vector(weights, "weights")
    n = x.size
    if not (y.size == w.size == n) or n == 0:
        raise ValueError(f"a, b and weights need one entry per paired unit, got {n}, {y.size} and {w.size}")
    if clusters is not None and len(clusters) != n:
        raise ValueError(f"clusters has {len(clusters)} entries for {n} paired units")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0, got {bootstrap}")
    if np.any(w <= 0):
        raise ValueError("weights must be positive")
    codes, groups = (np.arange(n), n) if clusters is None else _codes(clusters)
    total = float(w.sum())
    d = y - x
    diff = float(w @ d) / total
    influence = np.bincount(codes, weights=w * (d - diff), minlength=groups)
    stderr = math.sqrt(groups / (groups - 1) * float(influence @ influence)) / total if groups >= 2 else _NAN
    # one "stratum" whose clusters carry weighted sums and weights: the bootstrap resamples a weighted ratio
    part = _Stratum(1.0, float(w @ x) / total, float(w @ y) / total, diff, stderr,
                    np.bincount(codes, weights=w * d, minlength=groups), np.bincount(codes, weights=w, minlength=groups))
    binary = _binary(x) and _binary(y)
    a_only, b_only = _discordant(x, y) if binary else (None, None)
    return PairedDifference(
        n=n, clusters=groups, a_score=part.a_mean, b_score=part.b_mean, diff=diff, stderr=stderr,
        diff_ci95=(diff - Z95 * stderr, diff + Z95 * stderr), diff_ci95_bootstrap=_bootstrap([part], bootstrap, seed),
        p_value=_wald_p(diff, stderr), test="wald_clustered", mde80=(Z95 + Z80) * stderr, a_only=a_only,
        b_only=b_only)


def wilson_interval(successes: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval for a proportion; (nan, nan) for an empty bin."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return _NAN, _NAN
    p = successes / n
    z2 = Z95 * Z95
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def proportion_interval(mean: float, stderr: float, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a mean of values in [0, 1], at its effective sample size.

    The effective size is n_eff = p(1 − p) / stderr² (Kish's design effect: a clustered or
    weighted error counts fewer independent units than n); it is n where that is undefined
    (p of 0 or 1, or a zero error). The interval stays within [0, 1], unlike mean ± 1.96
    stderr near 0 or 1; for n independent 0/1 values it is the ordinary Wilson interval up to
    the n − 1 of the sample variance. (nan, nan) without a mean, an error or a unit.
    """
    if not (math.isfinite(mean) and math.isfinite(stderr)) or n <= 0:
        return _NAN, _NAN
    p = min(1.0, max(0.0, mean))
    size = p * (1 - p) / (stderr * stderr) if stderr > 0 and 0 < p < 1 else float(n)
    z2 = Z95 * Z95
    center = (p + z2 / (2 * size)) / (1 + z2 / size)
    half = Z95 / (1 + z2 / size) * math.sqrt(p * (1 - p) / size + z2 / (4 * size * size))
    return max(0.0, center - half), min(1.0, center + half)
