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
                  console: Console | None = None, *, per_task: bool = False) -> None:
    """Primary score per requested spec (`RunRecord.primary_scores`); with `per_task`, every task's metrics too."""
    console = console or wide_console()
    scores = {spec: s.to_dict() for spec, s in primary_scores.items()}
    # pass@1 of n samples: its error counts a question's samples as one cluster; the naive one beside it
    naive = {t.name: t.metrics[t.primary_metric].stderr_naive for t in tasks
             if t.metrics[t.primary_metric].stderr_naive is not None}
    headline = Table(title="Primary scores", title_justify="left")
    columns = ("spec", "metric", "score", "± stderr", "n") + (("± naive, samples as independent",) if naive else ())
    for column in columns:
        headline.add_column(column, justify="right" if column != "spec" else "left")
    for spec, s in scores.items():
        for row in _headline_rows(spec, s):
            headline.add_row(*row, *((_fmt(naive.get(spec)) if spec in naive else "",) if naive else ()))
    console.print(headline)

    if per_task:
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
    """Return a spec's headline rows: its own, and for a suite also its other aggregations.

    A suite's members get rows too where the headline is not a plain mean over tasks (a
    table of benchmarks, or no overall score).
    """
    if "members" not in s:
        return [(spec, s["metric"], _fmt(s["score"]), _fmt(s["stderr"]), str(s["num_instances"]))]
    primary = s.get("aggregation")
    rows: list[tuple[str, ...]] = [(spec, _metric(s) if primary else "each member's", _fmt(s["score"]), _fmt(s["stderr"]),
             str(s["num_instances"]))]
    for agg in ("macro", "micro", "member_mean", "rrgs", "size_weighted"):
        if agg in s and agg != primary:
            rows.append((f"  {agg}", "", _fmt(s[agg]), _fmt(s.get(f"{agg}_stderr")), ""))
    if primary not in ("macro", "micro", "size_weighted"):
        for name, m in s["members"].items():
            rows.append((f"  {name}", _metric(m), _fmt(m["score"]), _fmt(m["stderr"]), str(m["num_instances"])))
    return rows


def print_task_table(rows: Iterable, console: Console | None = None) -> None:
    """Print one line per task spec: its kind, split, shots, primary metric and number of items."""
    console = console or Console(width=200)
    table = Table(title_justify="left")
    for column in ("spec", "kind", "split", "shots", "primary metric", "items"):
        table.add_column(column, justify="right" if column in ("shots", "items") else "left")
    for row in rows:
        shots = str(row.shots) if row.shots >= 0 else "mixed"
        items = "—" if row.items is None else str(row.items)  # no count known (e.g. Paloma without data)
        table.add_row(row.spec, row.kind, row.split, shots, row.primary_metric, items)
    console.print(table)


def _ci(interval: Sequence[float], binary: bool = False) -> str:
    """Show a paired difference's interval; for 0/1 metrics clipped to [−1, 1], where B − A lies."""
    lo, hi = interval
    if binary:
        lo, hi = max(-1.0, lo), min(1.0, hi)
    return "—" if math.isnan(lo) or math.isnan(hi) else f"[{lo:+.3f}, {hi:+.3f}]"


def _p(value: Optional[float]) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.3g}"


def print_agreement(comparison: Sequence, run_a: str, run_b: str, console: Console | None = None) -> None:
    """Print the paired comparison of two runs, a row per task and suite.

    Each row gives the agreement (identical predictions, max |Δ sum_logits|) and the paired
    difference B − A with its interval, p-values and minimum detectable effect.
    """
    console = console or Console(width=max(Console().width, 160))
    console.print(f"A = {run_a}\nB = {run_b}", soft_wrap=True)
    table = Table(title="Paired comparison, B − A", title_justify="left")
    for column in ("task", "n", "same", "max |Δ|", "metric", "A", "B", "B − A", "95% CI", "p", "p Holm",
                   "MDE80"):
        table.add_column(column, justify="left" if column in ("task", "metric") else "right", no_wrap=True)
    for i, c in enumerate(comparison):
        before_suites = c.kind == "task" and i + 1 < len(comparison) and comparison[i + 1].kind == "suite"
        delta = "—" if c.max_abs_delta_sum_logits is None else f"{c.max_abs_delta_sum_logits:.1e}"
        table.add_row(c.task, str(c.n), f"{c.identical / c.n:.1%}", delta, c.metric, _fmt(c.a_score),
                      _fmt(c.b_score), f"{c.diff:+.4f}", _ci(c.diff_ci95, c.a_only is not None), _p(c.p_value), _p(c.p_holm),
                      _fmt(c.mde80), end_section=before_suites)
    console.print(table)
    clustered = comparison[0].cluster_by if comparison else None
    console.print("same: identical predictions; max |Δ|: largest |Δ sum_logits| over all choices; "
                  "95% CI: B − A ± 1.96 clustered paired standard errors, for 0/1 metrics clipped to [−1, 1]"
                  + (f" (documents clustered by {clustered})" if clustered else "")
                  + "; p: exact McNemar (0/1 metrics) or Wald on the clustered error; p Holm: adjusted across "
                  "the tasks (suites apart); MDE80: the smallest |B − A| this n detects with 80% power",
                  soft_wrap=True)
