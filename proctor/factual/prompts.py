"""The factual probe's prompt and decoding protocol (seed: factual-probe-output-schema.txt).

Anchor queries get the instruction wrapper; every other family already carries its own
surface form (that is the perturbation), so it gets only a bare `Answer:` cue. No chat
template, for base and instruct models alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

PROMPT = "Question: {q}\nAnswer with only the shortest correct answer.\nAnswer:"
CONDITION_FAMILIES = ("anchor", "paraphrase", "reverse", "recognition", "crosslingual")


def build_prompt(row: Mapping) -> str:
    """The seed's `runner/eval_run.py:build_prompt`, exactly."""
    if row["condition_family"] == "anchor":
        return PROMPT.format(q=row["query"])
    return f"{row['query']}\nAnswer:"


@dataclass(frozen=True)
class Decoding:
    """The seed's generation settings (`configs/models.yaml:generation`)."""

    max_new_tokens: int = 24
    max_prompt_len: int = 192     # left truncation, left padding
    num_beams: int = 1
    temperature: float = 0.0      # greedy
    dtype: str = "bfloat16"       # where the device supports it
    seed: int = 20260101


DECODING = Decoding()


def condition_of(row: Mapping) -> str:
    """The condition a query belongs to for ISS/KTS: its family, per language for crosslingual."""
    family = row["condition_family"]
    return f"crosslingual:{row['language']}" if family == "crosslingual" else family
