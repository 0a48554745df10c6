"""Which scored units of a task are not independent, and the primary metric's error with them.

A task's unit is its document, except where a document holds several samples (GSM8K n=8,
HumanEval n=64): pass@1 is then the mean over samples, and a question's samples are one
cluster. Documents a task declares dependent (the sidecar's `cluster`: SocialIQA's questions
of one context, a task file's `cluster` field) are one cluster; a sidecar column
(`CLUSTER_COLUMNS`, e.g. MMLU's subject) can group them into coarser clusters on request.
Pure: reads records, no I/O.
"""

from __future__ import annotations

from typing import Hashable, Optional

from proctor.metrics.stats import ClusteredMean, clustered_mean
from proctor.outputs.records import GenerationRecord, SampleOutput, TaskRecord

#: sidecar columns documents can be clustered by (`--cluster-by`)
CLUSTER_COLUMNS = ("subject", "reasoning_type", "benchmark", "cluster")


def sample_correct(sample: SampleOutput) -> Optional[float]:
    """Return a sample's own 0/1 outcome: GSM8K's `correct`, HumanEval's `passed` (None: neither)."""
    for key in ("correct", "passed"):
        value = sample.details.get(key)
        if isinstance(value, bool):
            return float(value)
    return None


def per_sample(task: TaskRecord) -> bool:
    """Whether the primary metric is a mean over each document's samples (pass@1 of n > 1)."""
    return task.primary_metric == "pass_at_1" and any(
        isinstance(r, GenerationRecord) and len(r.model_output) > 1 for r in task.records)


def declares_clusters(task: TaskRecord) -> bool:
    """Whether any two of the task's documents share a declared cluster."""
    declared = [row.cluster for row in task.sidecar if row.cluster is not None]
    return len(set(declared)) < len(declared)


def doc_clusters(task: TaskRecord, cluster_by: Optional[str]) -> dict[str, Hashable]:
    """Map each document (query_id) to its cluster key.

    The key is its sidecar `cluster_by` value (None: the cluster its task declares), or the
    document itself when it has none.
    """
    cluster_by = cluster_by or "cluster"
    if cluster_by not in CLUSTER_COLUMNS:
        raise ValueError(f"cannot cluster by {cluster_by!r}; choose one of {', '.join(CLUSTER_COLUMNS)}")
    column = {row.query_id: getattr(row, cluster_by) for row in task.sidecar}
    # a document without a value (a task with no subjects) stays its own cluster
    return {r.query_id: (cluster_by, value) if (value := column.get(r.query_id)) else ("document", r.query_id)
            for r in task.records}


def unit_values(task: TaskRecord, cluster_by: Optional[str] = None) -> tuple[list[float], list[Hashable]]:
    """Return the primary metric per unit (sample or document) and each unit's cluster."""
    clusters = doc_clusters(task, cluster_by)
    values: list[float] = []
    keys: list[Hashable] = []
    sampled = per_sample(task)
    for record in task.records:
        if sampled and isinstance(record, GenerationRecord):
            outcomes = [sample_correct(s) for s in record.model_output]
            if all(v is not None for v in outcomes):
                values.extend(v for v in outcomes if v is not None)
                keys.extend([clusters[record.query_id]] * len(outcomes))
                continue
        value = record.metric_value(task.primary_metric)
        if value is not None:
            values.append(float(value))
            keys.append(clusters[record.query_id])
    return values, keys


def task_error(task: TaskRecord, cluster_by: Optional[str] = None) -> Optional[ClusteredMean]:
    """Return the primary metric's mean with its naive and its clustered error.

    The naive error takes every unit as independent; the clustered one takes a question's
    samples, and with `cluster_by` a sidecar group, as one cluster. None for corpus metrics
    (perplexity: a ratio over bytes, not a mean of units).
    """
    if task.kind == "perplexity":
        return None
    values, keys = unit_values(task, cluster_by)
    return clustered_mean(values, keys) if values else None


def paired_units(a: TaskRecord, b: TaskRecord, cluster_by: Optional[str] = None,
                 ) -> tuple[list[str], list[float], list[float], list[Hashable]]:
    """Return the documents both runs scored, each run's primary metric of each, and their clusters.

    Documents are query ids in A's order; clusters come from A's sidecar. The paired unit
    is the document: a question's samples are summarised by its pass@1, so they count as
    one cluster.
    """
    metric = a.primary_metric
    records_b = {r.query_id: r for r in b.records}
    clusters = doc_clusters(a, cluster_by)
    ids, values_a, values_b, keys = [], [], [], []
    for record in a.records:
        other = records_b.get(record.query_id)
        if other is None:
            continue
        x, y = record.metric_value(metric), other.metric_value(metric)
        if x is None or y is None:   # perplexity documents without tokens
            continue
        ids.append(record.query_id)
        values_a.append(float(x))
        values_b.append(float(y))
        keys.append(clusters[record.query_id])
    return ids, values_a, values_b, keys

