"""Metrics over n samples of one prompt: the unbiased pass@k estimator and majority vote."""

from __future__ import annotations

from math import comb
from typing import Hashable, Sequence, TypeVar

H = TypeVar("H", bound=Hashable)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct.

    The unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k); 1.0 when n-c < k.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def majority(answers: Sequence[H]) -> H:
    """Return the most frequent answer; ties go to the one seen first."""
    if not answers:
        raise ValueError("majority of no answers")
    counts: dict[H, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    best = max(counts.values())
    return next(a for a in answers if counts[a] == best)
