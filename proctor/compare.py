"""Per-item agreement between two run directories of the same specs (e.g. two backends).

Items are joined on `query_id`. For each task: how many predictions are identical, the
largest |Δ sum_logits| over every choice (choice tasks), each run's primary score, and a
paired test of the per-item primary metric: the exact McNemar test when it is 0/1
(accuracy, exact match, pass@1 of one sample), else a paired t-test.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from proctor.errors import UserError
from proctor.outputs.run_dir import task_dir_name


@dataclass
class TaskAgreement:
    task: str
    metric: str                       # the task's primary metric
    n: int                            # items in both runs
    only_a: int                       # items in one run only
    only_b: int
    identical: int                    # identical predictions (choice index, or generated texts)
    max_abs_delta_sum_logits: Optional[float]   # choice tasks: over every choice of every item
    score_a: float                    # primary metric, mean over the joined items
    score_b: float
    a_only_correct: int               # binary metrics: items right in A and wrong in B
    b_only_correct: int
    test: str                         # "mcnemar_exact" or "paired_t"
    p_value: Optional[float]

    def to_dict(self) -> dict:
        return asdict(self)


def _read_run(directory: Path) -> dict:
    path = directory / "metrics.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{directory} is not a finished run directory (no metrics.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def _predictions(directory: Path, task: str) -> dict[str, dict]:
    path = directory / task_dir_name(task) / "predictions.jsonl"
    try:
        lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        return {row["query_id"]: row for row in map(json.loads, lines)}
    except FileNotFoundError:
        raise UserError(f"{path} is missing; the run directory is incomplete") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, TypeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def _prediction(row: dict, metric: str) -> Any:
    """What the item predicted: the choice index behind `metric`, else the generated texts."""
    if metric.startswith("acc_"):
        index = row["metrics"].get(metric.replace("acc_", "predicted_index_", 1))
        if index is not None:
            return index
    return tuple(sample.get("text") for sample in row["model_output"])


def _paired_test(a: list[float], b: list[float]) -> tuple[str, Optional[float], int, int]:
    from scipy import stats

    if all(v in (0.0, 1.0) for v in (*a, *b)):
        a_only = sum(1 for x, y in zip(a, b) if x > y)
        b_only = sum(1 for x, y in zip(a, b) if y > x)
        p = stats.binomtest(a_only, a_only + b_only).pvalue if a_only + b_only else 1.0
        return "mcnemar_exact", float(p), a_only, b_only
    diffs = [x - y for x, y in zip(a, b)]
    if len(diffs) < 2 or all(d == diffs[0] for d in diffs):
        return "paired_t", (1.0 if all(d == 0 for d in diffs) else None), 0, 0
    return "paired_t", float(stats.ttest_rel(a, b).pvalue), 0, 0


def compare_task(dir_a: Path, dir_b: Path, task: str, metric: str) -> TaskAgreement:
    preds_a, preds_b = _predictions(dir_a, task), _predictions(dir_b, task)
    shared = [q for q in preds_a if q in preds_b]
    if not shared:
        raise UserError(f"{task}: the two runs share no query_id; compare runs of the same spec and data")
    identical = sum(_prediction(preds_a[q], metric) == _prediction(preds_b[q], metric) for q in shared)
    deltas = [abs(x["sum_logits"] - y["sum_logits"])
              for q in shared
              for x, y in zip(preds_a[q]["model_output"], preds_b[q]["model_output"])
              if "sum_logits" in x and "sum_logits" in y]
    values_a = [float(preds_a[q]["metrics"][metric]) for q in shared]
    values_b = [float(preds_b[q]["metrics"][metric]) for q in shared]
    test, p, a_only, b_only = _paired_test(values_a, values_b)
    return TaskAgreement(
        task=task, metric=metric, n=len(shared), only_a=len(preds_a) - len(shared),
        only_b=len(preds_b) - len(shared), identical=identical,
        max_abs_delta_sum_logits=max(deltas) if deltas else None,
        score_a=math.fsum(values_a) / len(shared), score_b=math.fsum(values_b) / len(shared),
        a_only_correct=a_only, b_only_correct=b_only, test=test, p_value=p)


def compare_runs(dir_a: Path, dir_b: Path) -> list[TaskAgreement]:
    """Agreement for every task both runs scored (UserError when they share none, or when a
    file of either run does not have the shape proctor writes)."""
    try:
        tasks_a, tasks_b = _read_run(dir_a)["tasks"], _read_run(dir_b)["tasks"]
        shared = [t for t in tasks_a if t in tasks_b]
        if not shared:
            raise UserError(f"{dir_a} and {dir_b} scored no task in common; run the same specs on both")
        return [compare_task(dir_a, dir_b, task, tasks_a[task]["primary_metric"]) for task in shared]
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a file edited or of another tool
        raise UserError(f"{dir_a} or {dir_b} is not a proctor run directory as proctor writes it "
                        f"({type(e).__name__}: {e}); compare two unmodified run directories") from None
