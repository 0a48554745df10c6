"""Terminal tables: a run's results and the task list."""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from rich.console import Console
from rich.table import Table


def _fmt(value: float) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def print_results(scores: Mapping[str, dict], runs: Sequence, console: Console | None = None) -> None:
    """Primary score per requested spec, then every task's accuracies."""
    console = console or Console()
    headline = Table(title="Primary scores", title_justify="left")
    for column in ("spec", "metric", "score", "± stderr", "n"):
        headline.add_column(column, justify="right" if column != "spec" else "left")
    for spec, s in scores.items():
        headline.add_row(spec, s["metric"], _fmt(s["score"]), _fmt(s["stderr"]), str(s["num_instances"]))
    console.print(headline)

    if len(runs) > 1 or any(len(s) > 4 for s in scores.values()):
        detail = Table(title="Tasks", title_justify="left")
        names = ["acc_raw", "acc_per_token", "acc_per_char", "acc_per_byte", "acc_uncond"]
        for column in ("task", "n", *names):
            detail.add_column(column, justify="right" if column != "task" else "left")
        for run in runs:
            cells = [_fmt(run.metrics[n].mean) if n in run.metrics else "" for n in names]
            detail.add_row(run.config.name, str(len(run.instances)), *cells)
        console.print(detail)


def print_task_table(rows: Iterable, console: Console | None = None) -> None:
    console = console or Console(width=200)
    table = Table(title_justify="left")
    for column in ("spec", "kind", "split", "shots", "primary metric", "items"):
        table.add_column(column, justify="right" if column in ("shots", "items") else "left")
    for row in rows:
        table.add_row(row.spec, row.kind, row.split, str(row.shots), row.primary_metric, str(row.items))
    console.print(table)
