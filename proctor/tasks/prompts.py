"""OLMES prompt building blocks (exact bytes; see spec/olmes.md "Common machinery")."""

from __future__ import annotations

import re
from typing import Sequence

LETTERS = "ABCDE"
UNCOND_CONTEXT = "Answer:"


def make_mcq_prompt(question: str, choices: Sequence[str]) -> str:
    """'Question: q' then ' A. choice' lines (leading space before each letter), then 'Answer:'."""
    if len(choices) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} choices are supported, got {len(choices)}")
    lines = "\n".join(f" {LETTERS[i]}. {text}" for i, text in enumerate(choices))
    return f"Question: {question}\n{lines}\nAnswer:"


def make_cloze_prompt(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def shot_block(text: str, target: str) -> str:
    """One few-shot example: its prompt text followed by `" " + gold`."""
    return f"{text} {target}"


def fewshot_prefix(description: str, shots: Sequence[str]) -> str:
    """Everything before the doc's own text; shared by every doc of a task."""
    if not shots:
        return description
    return description + "\n\n".join(shots) + "\n\n"


def assemble_prompt(description: str, shots: Sequence[str], doc_text: str) -> str:
    return fewshot_prefix(description, shots) + doc_text


def hellaswag_preprocess(text: str) -> str:
    """OLMES HellaSwag cleanup: '[title]' becomes a sentence break, other markup goes."""
    text = text.strip()
    text = re.sub("\\.? \\[title\\]", ". ", text)
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")
