"""The shape of a generation task: rows → one Generate request each → a scored doc.

A family module subclasses `GenerationTask`: it builds `GenerationInstance`s (the request
and the gold `target`) and says how one doc's samples score (`score`). Metrics are
per-doc numbers averaged over docs (pass@k, maj@k and exact match all are).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

from proctor.requests import Generate, GenerateResult
from proctor.tasks.base import Task


@dataclass(frozen=True)
class GenerationInstance:
    """One document turned into one Generate request (`query_id` as for choice instances)."""

    query_id: str
    task: str
    doc_id: int
    native_id: Any
    request: Generate
    target: Any                 # the gold answer, in whatever form the task's `score` reads
    metadata: dict = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        return self.request.context

    @property
    def requests(self) -> tuple[Generate, ...]:
        return (self.request,)

    @property
    def uncond_requests(self) -> tuple:
        return ()


@dataclass(frozen=True)
class DocScore:
    """One doc's outcome: its per-doc metrics and what the records show."""

    metrics: dict               # metric name -> float (every doc of a task has the same names)
    predicted_answer: str       # e.g. the first sample's extracted answer
    correct_answer: str
    is_correct: bool            # by the task's primary metric
    model_output: list          # one dict per sample (text, num_tokens, finish_reason, extracted, ...)


class GenerationTask(Task):
    """A task whose instances are `GenerationInstance`s, scored by `score`."""

    #: metric names `score` returns for every doc; the config's primary metric is one of them
    metric_names: tuple[str, ...] = ()

    @abstractmethod
    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Per-doc metrics from the request's samples (pure: no I/O, no model)."""
