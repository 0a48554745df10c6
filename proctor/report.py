"""Terminal tables: a run's results and the task list."""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Optional, Sequence

from rich.console import Console
from rich.table import Table

from proctor.outputs.records import SpecScore, TaskRecord


def wide_console() -> Console:
    """At least 120 columns, so tables do not fold when written to a file or a pipe."""
    return Console(width=max(Console().width, 120))


def _fmt(value: Optional[float]) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def print_results(primary_scores: Mapping[str, SpecScore], tasks: Sequence[TaskRecord],
                  console: Console | None = None) -> None:
    """Primary score per requested spec (`RunRecord.primary_scores`), then every task's metrics."""
    console = console or Console()
    scores = {spec: s.to_dict() for spec, s in primary_scores.items()}
    headline = Table(title="Primary scores", title_justify="left")
    for column in ("spec", "metric", "score", "± stderr", "n"):
        headline.add_column(column, justify="right" if column != "spec" else "left")
    for spec, s in scores.items():
        for row in _headline_rows(spec, s):
            headline.add_row(*row)
    console.print(headline)

    if len(tasks) > 1 or any("members" in s for s in scores.values()):
        # tasks of one run may have different metrics (accuracies, mc2, pass@k): each row
        # shows its primary, then the others by name
        detail = Table(title="Tasks", title_justify="left")
        detail.add_column("task", no_wrap=True, max_width=40, overflow="ellipsis")
        for column in ("n", "primary", "score"):
            detail.add_column(column, justify="right" if column in ("n", "score") else "left", no_wrap=True)
        detail.add_column("other metrics")
        for task in tasks:
            primary = task.primary_metric
            others = "  ".join(f"{k} {_fmt(v.mean)}" for k, v in task.metrics.items() if k != primary)
            detail.add_row(task.name, str(task.num_instances), primary, _fmt(task.primary_score), others)
        console.print(detail)


def _metric(entry: Mapping) -> str:
    agg = entry.get("aggregation")
    return f"{agg}({entry['metric']})" if agg else entry["metric"]


def _headline_rows(spec: str, s: Mapping) -> list[tuple[str, ...]]:
    """A spec's row; for a suite also its other aggregations, and its members where the
    headline is not a plain mean over tasks (a table of benchmarks, or no overall score)."""
    if "members" not in s:
        return [(spec, s["metric"], _fmt(s["score"]), _fmt(s["stderr"]), str(s["num_instances"]))]
    primary = s.get("aggregation")
    rows: list[tuple[str, ...]] = [(spec, _metric(s) if primary else "each member's", _fmt(s["score"]), _fmt(s["stderr"]),
             str(s["num_instances"]))]
    for agg in ("macro", "micro", "member_mean", "rrgs"):
        if agg in s and agg != primary:
            rows.append((f"  {agg}", "", _fmt(s[agg]), _fmt(s.get(f"{agg}_stderr")), ""))
    if primary not in ("macro", "micro"):
        for name, m in s["members"].items():
            rows.append((f"  {name}", _metric(m), _fmt(m["score"]), _fmt(m["stderr"]), str(m["num_instances"])))
    return rows


def print_task_table(rows: Iterable, console: Console | None = None) -> None:
    console = console or Console(width=200)
    table = Table(title_justify="left")
    for column in ("spec", "kind", "split", "shots", "primary metric", "items"):
        table.add_column(column, justify="right" if column in ("shots", "items") else "left")
    for row in rows:
        shots = str(row.shots) if row.shots >= 0 else "mixed"
        items = "—" if row.items is None else str(row.items)  # no count known (e.g. Paloma without data)
        table.add_row(row.spec, row.kind, row.split, shots, row.primary_metric, items)
    console.print(table)


def print_agreement(agreement: Sequence, run_a: str, run_b: str, console: Console | None = None) -> None:
    """Per task: identical predictions, max |Δ sum_logits|, both primary scores and the paired test."""
    console = console or wide_console()
    console.print(f"A = {run_a}\nB = {run_b}", soft_wrap=True)
    table = Table(title="Per-item agreement", title_justify="left")
    for column in ("task", "n", "same", "max |Δ|", "metric", "A", "B", "A>B", "B>A", "p"):
        table.add_column(column, justify="left" if column in ("task", "metric") else "right", no_wrap=True)
    for a in agreement:
        delta = "—" if a.max_abs_delta_sum_logits is None else f"{a.max_abs_delta_sum_logits:.1e}"
        table.add_row(a.task, str(a.n), f"{a.identical / a.n:.1%}", delta, a.metric, _fmt(a.score_a),
                      _fmt(a.score_b), str(a.a_only_correct), str(a.b_only_correct),
                      "—" if a.p_value is None else f"{a.p_value:.3g}")
    console.print(table)
    console.print("same: identical predictions; max |Δ|: largest |Δ sum_logits| over all choices; "
                  "A>B / B>A: items right in one run only; p: exact McNemar (0/1 metrics) or paired t-test",
                  soft_wrap=True)
