"""The shape of a generation task: rows → one Generate request each → a scored doc.

A family module subclasses `GenerationTask`: it says what one doc asks for (`doc_request`),
what its gold answer is (`doc_target`) and how one doc's samples score (`score`). Metrics are
per-doc numbers averaged over docs (pass@k, maj@k and exact match all are).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from proctor.requests import Generate, GenerateResult
from proctor.tasks.base import Task, about, check_limit


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

    def prompt_prefix(self, data_dir: Optional[Path]) -> str:
        """Description and few-shot block every doc's prompt starts with."""
        return ""

    @abstractmethod
    def doc_request(self, prefix: str, doc: dict) -> Generate:
        """The doc's Generate request; `prefix` is `prompt_prefix()`."""

    @abstractmethod
    def doc_target(self, doc: dict) -> Any:
        """The doc's gold answer, in the form `score` reads."""

    def instances(self, data_dir: Optional[Path],
                  limit: Optional[int] = None) -> list[GenerationInstance]:
        check_limit(limit)  # before any data is read
        with about(self.config.name):
            return self._instances(data_dir, limit)

    def _instances(self, data_dir: Optional[Path], limit: Optional[int]) -> list[GenerationInstance]:
        numbered = self.numbered_docs(data_dir, limit)
        prefix = self.prompt_prefix(data_dir)
        return [
            GenerationInstance(
                query_id=qid, task=self.config.name, doc_id=doc_id, native_id=doc["native_id"],
                request=self.doc_request(prefix, doc), target=self.doc_target(doc),
                metadata=self.doc_metadata(doc),
            )
            for doc_id, doc, qid in numbered
        ]

    @abstractmethod
    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Per-doc metrics from the request's samples (pure: no I/O, no model)."""
