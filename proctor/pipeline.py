"""One evaluation: task specs -> instances -> engine -> per-query records -> aggregates."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from proctor.engine import Engine
from proctor.metrics import Stat, aggregate_docs, choice_score, score_multiple_choice
from proctor.metrics.harness import lm_eval_choice_metrics
from proctor.outputs.records import Prediction, QueryMetadata
from proctor.evaluate_generation import generation_settings, is_generation_run, score_generation
from proctor.evaluate_perplexity import is_perplexity_run, perplexity_totals, score_perplexity
from proctor.requests import Generate, LoglikelihoodResult
from proctor.scores import TaskResult, spec_entry
from proctor.tasks.base import Instance, Task, TaskConfig
from proctor.tasks.registry import resolve

DOC_METRICS = ("acc_raw", "acc_per_token", "acc_per_char", "acc_per_byte", "acc_uncond", "acc_norm", "mc2")


@dataclass
class TaskRun:
    """A task's instances, and once scored, its records and aggregates."""

    config: TaskConfig
    instances: list[Instance]
    warnings: list[str] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    sidecar: list[QueryMetadata] = field(default_factory=list)
    metrics: dict[str, Stat] = field(default_factory=dict)
    seconds: float = 0.0
    task: Optional[Task] = None   # the task object (generation tasks score through it)

    @property
    def primary(self) -> Stat:
        return self.metrics[self.config.primary_metric]

    def add_record(self, inst: Any, *, metrics: dict, model_output: list, label: Any, is_correct: bool,
                   predicted_answer: str, correct_answer: str) -> None:
        """One doc's prediction line and sidecar row (choice and generation tasks alike)."""
        self.predictions.append(Prediction(
            query_id=inst.query_id, doc_id=inst.doc_id, native_id=inst.native_id,
            metrics=metrics, model_output=model_output, label=label,
        ))
        self.sidecar.append(QueryMetadata(
            query_id=inst.query_id,
            benchmark=inst.metadata.get("benchmark", self.config.benchmark),
            subject=inst.metadata.get("subject"),
            reasoning_type=inst.metadata.get("reasoning_type"),
            is_correct=bool(is_correct),
            predicted_answer=predicted_answer,
            correct_answer=correct_answer,
            task=self.config.name,
            doc_id=inst.doc_id,
        ))

    def summary(self) -> dict:
        """The task's entry in metrics.json."""
        return {
            "task_config": asdict(self.config),
            "num_instances": len(self.instances),
            "primary_metric": self.config.primary_metric,
            "primary_score": self.primary.mean,
            "metrics": {k: {"mean": s.mean, "stderr": s.stderr} for k, s in self.metrics.items()},
            "processing_time": self.seconds,
            "warnings": self.warnings,
            **({"generation": generation_settings(self)} if is_generation_run(self) else {}),
            **({"perplexity": perplexity_totals(self)} if is_perplexity_run(self) else {}),
        }


@dataclass
class SpecPlan:
    """A spec as the user wrote it and the leaf tasks it expands to."""

    spec: str
    task_names: list[str]
    is_suite: bool


@dataclass
class Plan:
    specs: list[SpecPlan]
    tasks: dict[str, TaskRun]   # leaf task name -> run, in first-seen order


def plan(specs: Sequence[str], data_dir: Optional[Path], limit: Optional[int]) -> Plan:
    """Resolve specs and build every instance; all data errors surface here, before any model loads."""
    spec_plans: list[SpecPlan] = []
    runs: dict[str, TaskRun] = {}
    for spec in specs:
        tasks: list[Task] = resolve(spec)
        names = [t.config.name for t in tasks]
        spec_plans.append(SpecPlan(spec, names, is_suite=names != [spec]))
        for task in tasks:
            if task.config.name not in runs:
                runs[task.config.name] = TaskRun(task.config, task.instances(data_dir, limit), task=task)
    for run in runs.values():
        run.warnings.extend(duplicate_native_id_warnings(run))
    return Plan(spec_plans, runs)


def duplicate_native_id_warnings(run: TaskRun) -> list[str]:
    counts = Counter(inst.native_id for inst in run.instances)
    repeated = sum(c - 1 for c in counts.values() if c > 1)
    if not repeated:
        return []
    return [
        f"{run.config.name}: {repeated} duplicate native_ids (the same native_id on more than one "
        "doc_id); their query_ids are disambiguated by doc_id"
    ]


def truncation_warnings(run: TaskRun, truncated: Mapping[str, int], max_length: int) -> list[str]:
    """A warning when left truncation to `max_length` cut any document's prompt: its score is
    then not the protocol's."""
    cut = [max((truncated.get(r.key, 0) for r in (*i.requests, *i.uncond_requests)), default=0)
           for i in run.instances]
    hit = sum(1 for c in cut if c)
    if not hit:
        return []
    return [f"{run.config.name}: {hit} of {len(cut)} documents did not fit in --max-length {max_length} "
            f"and lost up to {max(cut)} context tokens to left truncation; their scores do not follow "
            f"the protocol (raise --max-length)"]


def score_task(run: TaskRun, results: Mapping[str, LoglikelihoodResult]) -> None:
    """Fill a task run's predictions, sidecar rows and aggregates from engine results."""
    if is_generation_run(run):
        return score_generation(run, results)  # type: ignore[arg-type]
    if is_perplexity_run(run):
        return score_perplexity(run, results)
    primary_kind = run.config.primary_metric.removeprefix("acc_")
    doc_metrics = []
    for inst in run.instances:
        unconds = [results[r.key] for r in inst.uncond_requests] or [None] * len(inst.continuations)
        choices = [
            choice_score(cont, results[req.key], unc)
            for cont, req, unc in zip(inst.continuations, inst.requests, unconds)
        ]
        metrics = score_multiple_choice(choices, inst.label)
        if inst.metadata.get("scoring") == "lm_eval":  # lm-eval's acc_norm (and TruthfulQA mc2)
            metrics.update(lm_eval_choice_metrics([c.sum_logits for c in choices], inst.choices,
                                                  inst.label, inst.metadata.get("true_choices")))
        doc_metrics.append(metrics)
        predicted = metrics[f"predicted_index_{primary_kind}"]
        run.add_record(
            inst,
            metrics=metrics,
            model_output=[c.to_dict() for c in choices],
            label=inst.label,
            is_correct=metrics.get("is_correct", predicted == inst.label),
            predicted_answer=inst.choices[predicted],
            correct_answer=inst.choices[inst.label],
        )
    run.metrics = aggregate_docs(doc_metrics, DOC_METRICS)


def requests_of(evaluation: Plan) -> tuple[list, list]:
    """Every request of the plan, split into scored (loglikelihood, rolling) and generated ones."""
    requests = [
        req
        for run in evaluation.tasks.values()
        for inst in run.instances
        for req in (*inst.requests, *inst.uncond_requests)
    ]
    return [r for r in requests if not isinstance(r, Generate)], [r for r in requests if isinstance(r, Generate)]


def evaluate(evaluation: Plan, engine: Engine) -> None:
    """Run every request of the plan through the engine once, then score each task."""
    scored, generated = requests_of(evaluation)
    started = time.perf_counter()
    by_key: dict = dict(zip((r.key for r in scored), engine.run(scored)))
    scored_seconds = time.perf_counter() - started
    by_key.update(zip((r.key for r in generated), engine.generate(generated)))
    generated_seconds = time.perf_counter() - started - scored_seconds
    for run in evaluation.tasks.values():
        t0 = time.perf_counter()
        run.warnings.extend(truncation_warnings(run, engine.truncated, engine.policy.max_length))
        score_task(run, by_key)
        own = sum(len(i.requests) + len(i.uncond_requests) for i in run.instances)
        # Requests are batched across tasks, so model time is shared out by request count
        # (generation time among generation requests, scoring time among the others).
        if is_generation_run(run):
            share = generated_seconds * own / max(len(generated), 1)
        else:
            share = scored_seconds * own / max(len(scored), 1)
        run.seconds = share + (time.perf_counter() - t0)


def primary_scores(evaluation: Plan) -> dict[str, dict]:
    """The headline entry of each spec the user asked for: a task's primary metric; a suite's
    declared primary aggregation as `score`, its other aggregations and members beside it."""
    results = {name: TaskResult.of(run.config, run.primary) for name, run in evaluation.tasks.items()}
    return {sp.spec: spec_entry(sp.spec, results) for sp in evaluation.specs}
