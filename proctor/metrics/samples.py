"""Per-doc metrics over the n samples of one prompt: pass@k and maj@k (OLMES semantics).

Both read only the samples' extracted answers and whether each is correct, so they are
the same for every generation task that repeats a prompt.
"""

from __future__ import annotations

from typing import Sequence

from proctor.metrics.sampling import majority, pass_at_k


def maj_at_k(answers: Sequence[str], correct: Sequence[bool], k: int) -> float:
    """1.0 when the majority answer of the first k samples is correct (ties: first seen).

    Correctness is a function of the answer text, so the voted answer is as correct as
    the first sample that gave it.
    """
    _check(answers, correct, k)
    head = list(answers[:k])
    voted = majority(head)
    return 1.0 if correct[head.index(voted)] else 0.0


def pass_at_ks(correct: Sequence[bool], ks: Sequence[int]) -> dict[str, float]:
    """`pass_at_<k>` for each k, from whether each of the n samples is correct."""
    n, c = len(correct), sum(bool(x) for x in correct)
    return {f"pass_at_{k}": pass_at_k(n, c, k) for k in ks}


def sampled_metrics(answers: Sequence[str], correct: Sequence[bool],
                    ks: Sequence[int]) -> dict[str, float]:
    """`pass_at_<k>` and `maj_at_<k>` for each k, in that order of names."""
    for k in ks:
        _check(answers, correct, k)
    return {**pass_at_ks(correct, ks), **{f"maj_at_{k}": maj_at_k(answers, correct, k) for k in ks}}


def _check(answers: Sequence[str], correct: Sequence[bool], k: int) -> None:
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} correctness flags")
    if not 1 <= k <= len(answers):
        raise ValueError(f"k={k} needs 1 <= k <= n samples (n={len(answers)})")
