"""Multiple-choice scoring by log-likelihood ranking, as OLMES defines it."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from proctor.outputs.records import ChoiceOutput
from proctor.requests import LoglikelihoodResult


def choice_score(
    continuation: str, result: LoglikelihoodResult, uncond: Optional[LoglikelihoodResult] = None
) -> ChoiceOutput:
    """Build one choice's record (an OLMES `model_output` entry).

    `num_chars` counts the continuation's leading space.
    """
    num_chars = len(continuation)
    num_bytes = len(continuation.encode("utf-8"))
    return ChoiceOutput(
        sum_logits=result.sum_logits,
        num_tokens=result.num_tokens,
        num_chars=num_chars,
        num_bytes=num_bytes,
        is_greedy=result.is_greedy,
        logits_per_token=result.sum_logits / max(result.num_tokens, 1),
        logits_per_char=result.sum_logits / max(num_chars, 1),
        bits_per_byte=-result.sum_logits / max(num_bytes, 1) / math.log(2),
        sum_logits_uncond=None if uncond is None else uncond.sum_logits,
    )


def argmax(values: Sequence[float]) -> int:
    """Index of the largest value; ties go to the lowest index (as `np.argmax`)."""
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def score_multiple_choice(choices: Sequence[ChoiceOutput], label: int) -> dict:
    """Per-doc predictions and accuracies (OLMES `metrics` of a prediction line)."""
    predicted = {
        "raw": argmax([c.sum_logits for c in choices]),
        "per_token": argmax([c.logits_per_token for c in choices]),
        "per_char": argmax([c.logits_per_char for c in choices]),
        "per_byte": argmax([-c.bits_per_byte for c in choices]),
    }
    uncond = [c.sum_logits_uncond for c in choices if c.sum_logits_uncond is not None]
    if len(uncond) == len(choices):
        predicted["uncond"] = argmax([c.sum_logits - u for c, u in zip(choices, uncond)])
    metrics: dict = {f"predicted_index_{k}": v for k, v in predicted.items()}
    metrics["correct_choice"] = label
    for k, v in predicted.items():
        metrics[f"acc_{k}"] = float(v == label)
    gold = choices[label]
    metrics["sum_logits_corr"] = gold.sum_logits
    metrics["logits_per_token_corr"] = gold.logits_per_token
    metrics["logits_per_char_corr"] = gold.logits_per_char
    metrics["bits_per_byte_corr"] = gold.bits_per_byte
    return metrics
