"""Scoring a generation task's run: each doc's samples -> DocScore -> records and aggregates.

A task scores its docs with `score_many` when it has one (HumanEval runs all samples of
all docs through one sandbox pool there), else doc by doc with `score`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from proctor.metrics import aggregate_docs
from proctor.requests import GenerateResult
from proctor.tasks.generation import DocScore, GenerationTask

if TYPE_CHECKING:
    from proctor.evaluate import Plan, TaskRun


def is_generation_run(run: "TaskRun") -> bool:
    return isinstance(run.task, GenerationTask)


def prepare_code_execution(evaluation: "Plan", allow_unsafe_exec: bool) -> None:
    """Pass --allow-unsafe-exec to tasks that run generated code, and let them refuse now
    (`preflight`), before a model loads, rather than after generating."""
    for run in evaluation.tasks.values():
        if hasattr(run.task, "allow_unsafe_exec"):
            run.task.allow_unsafe_exec = allow_unsafe_exec  # type: ignore[union-attr]
        preflight = getattr(run.task, "preflight", None)
        if preflight is not None:
            preflight()


def generation_settings(run: "TaskRun") -> dict:
    """What a generation task asks the model for (metrics.json), and how its code ran, if it runs any."""
    settings: dict[str, Any] = {}
    if run.instances:
        request = run.instances[0].request.to_dict()
        settings = {k: v for k, v in request.items() if k not in ("request_type", "context")}
    sandbox_info = getattr(run.task, "sandbox_info", None)
    if sandbox_info is not None:
        settings["sandbox"] = sandbox_info().describe()
        settings["allow_unsafe_exec"] = bool(getattr(run.task, "allow_unsafe_exec", False))
    return settings


def score_generation(run: "TaskRun", results: Mapping[str, GenerateResult]) -> None:
    """Fill a generation task run's predictions, sidecar rows and aggregates."""
    task = run.task
    assert isinstance(task, GenerationTask)
    docs = [results[inst.request.key] for inst in run.instances]
    score_many = getattr(task, "score_many", None)
    if score_many is not None:
        scores: list[DocScore] = list(score_many(run.instances, docs))
    else:
        scores = [task.score(inst, res) for inst, res in zip(run.instances, docs)]
    for inst, score in zip(run.instances, scores):
        run.add_record(
            inst,
            metrics=score.metrics,
            model_output=score.model_output,
            label=score.correct_answer,
            is_correct=score.is_correct,
            predicted_answer=score.predicted_answer,
            correct_answer=score.correct_answer,
        )
    names = task.metric_names or tuple(scores[0].metrics) if scores else ()
    run.metrics = aggregate_docs([s.metrics for s in scores], names)
