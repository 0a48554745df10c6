"""The shape of a generation task: rows → one Generate request each → a scored doc.

A family module subclasses `GenerationTask`: it says what one doc asks for (`doc_request`),
what its gold answer is (`doc_target`) and how one doc's samples score (`score`; a family
that scores all docs at once, like HumanEval's sandbox pool, overrides `score_many`).
Metrics are per-doc numbers averaged over docs (pass@k, maj@k and exact match all are).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from proctor.metrics import aggregate_docs
from proctor.outputs.records import GenerationRecord, GenerationSettings, SampleOutput
from proctor.requests import Context, Generate, GenerateResult
from proctor.tasks.base import Scored, Task, about, check_limit, sidecar_row


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
    def prompt(self) -> Context:
        """The prompt: the request's context."""
        return self.request.context

    @property
    def requests(self) -> tuple[Generate, ...]:
        """The one Generate request."""
        return (self.request,)

    @property
    def uncond_requests(self) -> tuple:
        """Empty: a generation doc has no unconditioned requests."""
        return ()

    @property
    def gold(self) -> Any:
        """The target as JSON (a dataclass target, like HumanEval's problem, as its fields)."""
        target = self.target
        return asdict(target) if is_dataclass(target) and not isinstance(target, type) else target


@dataclass(frozen=True)
class DocScore:
    """One doc's outcome: its per-doc metrics and what the records show."""

    metrics: dict[str, float]   # metric name -> value (every doc of a task has the same names)
    predicted_answer: str       # e.g. the first sample's extracted answer
    correct_answer: str
    is_correct: bool            # by the task's primary metric
    model_output: tuple[SampleOutput, ...]   # one per sample


class GenerationTask(Task):
    """A task whose instances are `GenerationInstance`s, scored by `score`."""

    kind = "generation"
    #: metric names `score` returns for every doc; the config's primary metric is one of them
    metric_names: tuple[str, ...] = ()

    def prompt_prefix(self, data_dir: Optional[Path]) -> Any:
        """Read once what every doc's prompt is built from.

        The description and few-shot block as a prefix string, or (a family that lays prompts out
        as chats) its few-shot material.
        """
        return ""

    @abstractmethod
    def doc_request(self, prefix: Any, doc: dict) -> Generate:
        """Build the doc's Generate request; `prefix` is `prompt_prefix()`."""

    @abstractmethod
    def doc_target(self, doc: dict) -> Any:
        """Return the doc's gold answer, in the form `score` reads."""

    def instances(self, data_dir: Optional[Path],
                  limit: Optional[int] = None) -> list[GenerationInstance]:
        """Build one `GenerationInstance` per document, the prompt prefix read once for all."""
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

    def score_many(self, instances: Sequence[GenerationInstance],
                   results: Sequence[GenerateResult]) -> list[DocScore]:
        """Every doc's DocScore (doc by doc with `score` unless a family does better)."""
        return [self.score(inst, res) for inst, res in zip(instances, results)]

    def settings(self, instances: Sequence[GenerationInstance]) -> GenerationSettings:
        """Return what the task asks the model for (metrics.json), from its first request."""
        r = instances[0].request
        return GenerationSettings(max_gen_toks=r.max_gen_toks, stop=r.stop, do_sample=r.do_sample,
                                  temperature=r.temperature, top_p=r.top_p, repeats=r.repeats)

    def score_docs(self, instances: Sequence[GenerationInstance],
                   results: Mapping[str, GenerateResult]) -> Scored:
        """Score every doc into records, sidecar rows and means (with think tags, answers skip the reasoning)."""
        raw = [results[inst.request.key] for inst in instances]
        tags = self.config.think_tags
        if tags is None:
            scores = self.score_many(instances, raw)
        else:  # answers are read without the reasoning; the records keep the raw text
            scores = [_with_raw_text(s, r) for s, r in
                      zip(self.score_many(instances, [_without_reasoning(r, tags) for r in raw]), raw)]
        records = [GenerationRecord(query_id=inst.query_id, doc_id=inst.doc_id, native_id=inst.native_id,
                                    metrics=score.metrics, model_output=score.model_output,
                                    label=score.correct_answer)
                   for inst, score in zip(instances, scores)]
        sidecar = [sidecar_row(self.config, inst, is_correct=score.is_correct,
                               predicted_answer=score.predicted_answer, correct_answer=score.correct_answer)
                   for inst, score in zip(instances, scores)]
        names = self.metric_names or (tuple(scores[0].metrics) if scores else ())
        return Scored(records, sidecar, dict(aggregate_docs([s.metrics for s in scores], names)),
                      generation=self.settings(instances))


def without_reasoning(text: str, tags: tuple[str, str]) -> str:
    """Return the answer part of a generated text: what follows the last closing tag, left-stripped.

    That is lm-eval's `think_end_token` rule; a text whose reasoning never closed has no answer:
    the text before its opening tag.
    """
    opening, closing = tags
    if closing in text:
        return text.split(closing)[-1].lstrip()
    if opening and opening in text:
        return text[: text.index(opening)]
    return text


def _without_reasoning(result: GenerateResult, tags: tuple[str, str]) -> GenerateResult:
    return GenerateResult(tuple(replace(s, text=without_reasoning(s.text, tags)) for s in result.samples))


def _with_raw_text(score: DocScore, raw: GenerateResult) -> DocScore:
    """Return the doc's score with each sample's generated text, the answer text in `details`."""
    outputs = tuple(replace(out, text=sample.text, details={**out.details, "answer_text": out.text})
                    for out, sample in zip(score.model_output, raw.samples))
    return replace(score, model_output=outputs)
