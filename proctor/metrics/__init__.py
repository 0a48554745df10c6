"""Pure scoring functions: responses -> per-query metrics -> aggregates."""

from proctor.metrics.aggregate import MeanStat, RatioStat, Stat, aggregate_docs, suite_scores
from proctor.metrics.answers import (
    BBH_ANSWER,
    GSM8K_IGNORE,
    exact_match,
    extract_last_number,
    gsm8k_gold,
    gsm8k_match,
    regex_extract,
)
from proctor.metrics.choice import choice_score, score_multiple_choice
from proctor.metrics.samples import maj_at_k, sampled_metrics
from proctor.metrics.sampling import majority, pass_at_k

__all__ = [
    "BBH_ANSWER",
    "GSM8K_IGNORE",
    "MeanStat",
    "RatioStat",
    "Stat",
    "aggregate_docs",
    "choice_score",
    "exact_match",
    "extract_last_number",
    "gsm8k_gold",
    "gsm8k_match",
    "maj_at_k",
    "majority",
    "pass_at_k",
    "regex_extract",
    "sampled_metrics",
    "score_multiple_choice",
    "suite_scores",
]
