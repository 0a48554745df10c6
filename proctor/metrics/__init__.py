"""Pure scoring functions: responses -> per-query metrics -> aggregates."""

from proctor.metrics.aggregate import MeanStat, aggregate_docs, suite_scores
from proctor.metrics.choice import ChoiceScore, choice_score, score_multiple_choice
from proctor.metrics.sampling import majority, pass_at_k

__all__ = [
    "ChoiceScore",
    "MeanStat",
    "aggregate_docs",
    "choice_score",
    "majority",
    "pass_at_k",
    "score_multiple_choice",
    "suite_scores",
]
