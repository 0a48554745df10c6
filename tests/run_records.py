"""Small hand-made RunRecords for tests that need a run directory without running a model."""

from __future__ import annotations

from typing import Sequence

from proctor.engine.stats import EngineStats
from proctor.outputs.records import (
    ChoiceMetrics, ChoiceOutput, ChoiceRecord, EngineRecord, GenerationRecord, MetricSummary, ModelRecord, QueryMetadata, RunConfig, RunRecord,
    SampleOutput, SpecScore, TaskRecord, Timing,
)
from proctor.tasks.registry import task_config


def choice_record(spec: str, i: int, predicted: int, logits: Sequence[float], label: int = 0) -> ChoiceRecord:
    outputs = tuple(ChoiceOutput(v, 1, 2, 2, False, v, v / 2, -v / 2) for v in logits)
    acc = float(predicted == label)
    metrics = ChoiceMetrics(predicted, predicted, predicted, predicted, label, acc, acc, acc, acc,
                            logits[label], logits[label], logits[label] / 2, -logits[label] / 2)
    return ChoiceRecord(f"{spec}#{i}", i, i, metrics, outputs, label)


def generation_record(spec: str, i: int, text: str, correct: bool) -> GenerationRecord:
    return GenerationRecord(f"{spec}#{i}", i, i, {"exact_match": float(correct)},
                            (SampleOutput(text, 3, "stop", {"extracted": text.strip()}),), "4")


def task_record(spec: str, records: Sequence, kind: str) -> TaskRecord:
    config = task_config(spec)
    values = [r.metric_value(config.primary_metric) for r in records]
    mean = sum(values) / len(values) if values else None
    sidecar = tuple(QueryMetadata(r.query_id, config.benchmark, config.subject, None, bool(v), "A", "A", spec,
                                  r.doc_id) for r, v in zip(records, values))
    return TaskRecord(name=spec, kind=kind, config=config, num_instances=len(records),
                      primary_metric=config.primary_metric, metrics={config.primary_metric: MetricSummary(mean, None)},
                      processing_time=0.5, records=tuple(records), sidecar=sidecar)


def run_record(*tasks: TaskRecord) -> RunRecord:
    return RunRecord(
        primary_scores={t.name: SpecScore(t.primary_metric, t.primary_score, None, t.num_instances) for t in tasks},
        tasks={t.name: t for t in tasks},
        model=ModelRecord("hf", "tiny", "dir:abc|dtype=float32", "float32", "cpu", 2048, "auto", False, 1234),
        run_config=RunConfig(tasks=tuple(t.name for t in tasks), limit=None, data_dir=None),
        versions={"python": "3"}, git={"commit": None, "dirty": None}, command=(), warnings=(),
        timing=Timing("2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00", 1.0, 0.1, 0.2, 0.7, None),
        engine=EngineRecord(EngineStats(), None, None),
    )



