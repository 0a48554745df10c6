"""Which units of a task are clustered: a GSM8K n=8 question's samples, a sidecar column;
and the naive error recorded beside the clustered one."""

from __future__ import annotations

import math

import pytest

from proctor.outputs.run_dir import write_run

from proctor.metrics.aggregate import MeanStat
from proctor.metrics.clusters import task_error, unit_values
from proctor.outputs.records import GenerationRecord, SampleOutput
from proctor.pipeline import with_sample_error
from run_records import choice_record, task_record

N8 = "gsm8k::olmo3:n8:v2"
MC = "mmlu_astronomy:mc::olmes"


def n8_record(i: int, right: int) -> GenerationRecord:
    samples = tuple(SampleOutput("x", 1, "stop", {"extracted": "4", "correct": k < right}) for k in range(8))
    return GenerationRecord(f"{N8}#{i}", i, i, {"pass_at_1": right / 8}, samples, "4")


RIGHT = [8, 8, 7, 0, 0, 1, 8, 0, 0, 0]   # questions are mostly all right or all wrong: strongly clustered


def test_the_samples_of_one_question_are_one_cluster():
    task = task_record(N8, [n8_record(i, r) for i, r in enumerate(RIGHT)], "generation")
    values, clusters = unit_values(task)
    assert len(values) == 80 and len(set(clusters)) == 10
    error = task_error(task)
    assert error is not None and (error.n, error.clusters) == (80, 10)
    per_question = MeanStat.of(r / 8 for r in RIGHT)   # what metrics.json's stderr is: over questions
    assert error.mean == pytest.approx(per_question.mean)
    assert error.stderr_clustered == pytest.approx(per_question.stderr, rel=1e-12)
    p = sum(RIGHT) / 80
    assert error.stderr_naive == pytest.approx(math.sqrt(p * (1 - p) * 80 / 79 / 80), rel=1e-12)
    assert error.stderr_clustered > 2.5 * error.stderr_naive


def test_a_run_records_the_naive_error_beside_the_clustered_one():
    task = task_record(N8, [n8_record(i, r) for i, r in enumerate(RIGHT)], "generation")
    summary = with_sample_error(task).metrics["pass_at_1"]
    assert summary.stderr_naive == pytest.approx(task_error(task).stderr_naive)
    # one sample per document (greedy): nothing to add
    greedy = task_record(MC, [choice_record(MC, i, i % 2, [-1.0, -2.0]) for i in range(4)], "choice")
    assert with_sample_error(greedy) is greedy


def test_documents_cluster_by_a_sidecar_column():
    task = task_record(MC, [choice_record(MC, i, i % 2, [-1.0, -2.0]) for i in range(6)], "choice")
    assert task_error(task).clusters == 6
    by_subject = task_error(task, "subject")   # one subject: one cluster, no clustered error
    assert by_subject.clusters == 1 and math.isnan(by_subject.stderr_clustered)
    with pytest.raises(ValueError, match="cannot cluster by"):
        task_error(task, "doc_id")


def test_a_declared_cluster_is_used_without_asking(tmp_path):
    """Documents that share the sidecar's `cluster` (a passage) are one cluster in the
    task's error and in `proctor compare`, which then reports a clustered Wald test."""
    from dataclasses import replace

    from proctor.compare import compare_runs
    from run_records import run_record

    def run(predicted):
        task = task_record(MC, [choice_record(MC, i, p, [-1.0, -2.0]) for i, p in enumerate(predicted)], "choice")
        return replace(task, sidecar=tuple(replace(row, cluster=f"passage{i // 2}")
                                           for i, row in enumerate(task.sidecar)))

    a, b = run([0, 0, 1, 1, 0, 0, 1, 1]), run([1, 1, 1, 1, 0, 0, 0, 0])
    assert task_error(a).clusters == 4 and task_error(a, "subject").clusters == 1
    write_run(run_record(a), tmp_path / "a")
    write_run(run_record(b), tmp_path / "b")
    (row,) = compare_runs(tmp_path / "a", tmp_path / "b")
    assert (row.cluster_by, row.clusters, row.test) == ("cluster", 4, "wald_clustered")
    # B − A per document: -1 -1 | 0 0 | 0 0 | 1 1, cluster sums -2 0 0 2 around a mean of 0; CR1 with G/(G-1) = 4/3
    assert row.diff == 0 and row.stderr == pytest.approx(math.sqrt(4 / 3 * 8) / 8)
