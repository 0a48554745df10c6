"""RRGS, the Risk of Random Guessing Score (SlimPajama-DC, arXiv:2309.10818).

RRGS = 1 - (1/N) * sum_i |s_i - 0.25| over the N MMLU subject accuracies s_i: the
closer the subjects sit to the 4-choice chance level, the closer RRGS is to 1.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence, Union

MMLU_CHANCE = 0.25
MMLU_SUBJECT_COUNT = 57

Scores = Union[Sequence[float], Mapping[str, float]]


def rrgs(subject_scores: Scores, baseline: float = MMLU_CHANCE) -> float:
    """1 minus the mean absolute distance of the subject scores from `baseline`."""
    values = list(subject_scores.values()) if isinstance(subject_scores, Mapping) else list(subject_scores)
    if not values:
        raise ValueError("RRGS needs at least one subject score")
    bad = [v for v in values if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"subject scores must lie in [0, 1], got {bad[:3]}")
    return 1.0 - math.fsum(abs(v - baseline) for v in values) / len(values)
