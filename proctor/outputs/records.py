"""Typed per-query records: one prediction line and one metadata-sidecar row per query."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Prediction:
    """One line of `<task>/predictions.jsonl` (OLMES fields plus `query_id`)."""

    query_id: str
    doc_id: int
    native_id: Any
    metrics: dict          # predicted indices, accuracies, gold-choice log-probs
    model_output: list     # one dict per choice (ChoiceScore.to_dict()) or per generated sample
    label: Any             # gold choice index (choice tasks) or gold answer (generation tasks)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class QueryMetadata:
    """One row of the query metadata sidecar: the single join target for analysis."""

    query_id: str
    benchmark: str                 # socialiqa, mmlu_stem, mmlu_social_science, arc_easy, ...
    subject: Optional[str]         # MMLU subject; None elsewhere
    reasoning_type: Optional[str]  # SocialIQA ATOMIC relation; None elsewhere
    is_correct: bool               # by the task's primary metric
    predicted_answer: str          # the predicted choice as shown ("B", or the answer text for RC)
    correct_answer: str
    task: str                      # the task spec that produced the query
    doc_id: int

    def to_dict(self) -> dict:
        return asdict(self)
