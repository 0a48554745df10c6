"""The HTML report of one or more runs: one self-contained file that opens from disk offline.

The numbers come from `proctor.report.analysis`; this module lays them out. It writes the
tables; the charts are plotly figures serialised as JSON and drawn by the plotly.js bundle
inlined once; the items of every task travel as inlined JSON that a small script
(`page.js`) pages through, so a run of 10,000 items creates the DOM of 50 at a time. A
Content-Security-Policy lets only those two scripts run (by their hashes) and forbids
every network load.

Sections: the runs' provenance; headline scores with clustered and naive 95% intervals;
accuracy per subject / reasoning type / benchmark; for two runs the paired comparison and
the items that flipped; for a series of runs score curves; calibration of choice tasks;
generation diagnostics; the item browser.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import html
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence, Union

import plotly.graph_objects as go
from plotly.colors import qualitative

from proctor.errors import UserError, asked_as
from proctor.metrics.clusters import CLUSTER_COLUMNS
from proctor.outputs.checked import CheckedDirectory
from proctor.outputs.owned import OWNED_MARK
from proctor.outputs.records import RunRecord, SpecScore, TaskRecord, finite
from proctor.outputs.requests_file import REQUESTS_FILE, Prompt, read_prompts
from proctor.outputs.run_dir import open_run, read_run_files, task_dir_name
from proctor.report.analysis import (
    CALIBRATION_BINS,
    JSON,
    Breakdown,
    ErrorTable,
    TaskError,
    breakdowns,
    calibration_points,
    curve_order,
    finish_reasons,
    first_task,
    generation_counts,
    item_data,
    paired_rows,
    provenance_rows,
    reliability,
    spec_interval,
    task_errors,
    task_names,
)
from proctor.version import VERSION

if TYPE_CHECKING:
    from proctor.compare import TaskComparison

FOLDED_TASKS = 12           # a task table longer than this starts folded
GENERATOR = "proctor report"
FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'
RUN_COLORS = qualitative.Plotly               # run i keeps colour i in every chart
FINISH_COLORS = {"stop": "#2e7d32", "eos": "#1565c0", "length": "#c62828"}
TESTS = {"mcnemar_exact": "McNemar", "wald_clustered": "Wald"}   # the paired table's short names
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "typesetMath": False, "showTips": False}


# ---- small helpers ---------------------------------------------------------------------------


def _fmt(value: Optional[float], digits: int = 3) -> str:
    value = finite(value)
    return "—" if value is None else f"{value:.{digits}f}"


def _interval(lo: Optional[float], hi: Optional[float], digits: int = 3) -> str:
    lo, hi = finite(lo), finite(hi)
    return "—" if lo is None or hi is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _bounds(err: Optional[TaskError]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """Return a task's clustered 95% interval as (low, mean, high) for a chart; Nones where there is none."""
    if err is None:
        return None, None, None
    lo, hi = err.interval(clustered=True)
    return finite(lo), finite(err.mean), finite(hi)


def _diff_interval(bounds: Sequence[float], binary: bool) -> str:
    """Show a paired difference's interval; for 0/1 metrics clipped to [−1, 1], where B − A lies."""
    lo, hi = bounds
    if binary:
        lo, hi = max(-1.0, lo), min(1.0, hi)
    return _interval(lo, hi, 4)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _t(text: str) -> str:
    """Text for a chart: plotly reads tags (<b>, <a href>) and entities in its labels."""
    return html.escape(text, quote=False)


def _cells(values: Iterable[object], cls: str = "num") -> str:
    return "".join(f'<td class="{cls}">{_e(v)}</td>' for v in values)


def _table(table_id: str, head: str, rows: Iterable[str]) -> str:
    """Lay out a table, in a box that scrolls sideways when the table is wider than the page."""
    body = "".join(rows)
    return f'<div class="scroll"><table id="{_e(table_id)}"><thead>{head}</thead><tbody>{body}</tbody></table></div>'


def _script_json(value: JSON) -> str:
    r"""Encode `value` as JSON to inline in <script type="application/json">.

    The text is ASCII only, with <, > and & as \u escapes, so that no text inside
    (`</script>`, `<!--`) can end the element.
    """
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def run_labels(count: int) -> list[str]:
    """Name `count` runs A, B, C, ... (R27, R28, ... past Z): short names for table columns and legends."""
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(count)]


def _unique(names: Sequence[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for name in names:
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


@dataclass(frozen=True)
class Section:
    """One part of the page, listed in its navigation."""

    key: str                # the element's id is `<key>-section`
    title: str
    body: str               # HTML

    def html(self) -> str:
        """Render the section with its heading."""
        return f'<section id="{_e(self.key)}-section"><h2>{_e(self.title)}</h2>{self.body}</section>'


# ---- charts ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


@functools.lru_cache(maxsize=1)
def _plotly_packed() -> str:
    """plotly.js gzipped and in base64 (a third of its size), for page.js to unpack and run.

    The browser's DecompressionStream unpacks it; the script it then adds runs because its
    text has the hash the page's policy allows. Deterministic (no time in the gzip header).
    """
    return base64.b64encode(gzip.compress(_plotly_js().encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


@functools.lru_cache(maxsize=None)
def _page_asset(name: str) -> str:
    return resources.files("proctor.report").joinpath(name).read_text(encoding="utf-8")


def _page_js() -> str:
    return _page_asset("page.js")


def _page_css() -> str:
    return _page_asset("page.css")


@functools.lru_cache(maxsize=1)
def _template() -> JSON:
    figure = go.Figure(layout={"template": "plotly_white"})
    return json.loads(figure.to_json())["layout"]["template"]


@dataclass
class Charts:
    """The page's plotly figures by name; each is drawn into its `<div class="chart" data-chart=name>`."""

    figures: dict[str, JSON] = field(default_factory=dict)

    def add(self, name: str, figure: go.Figure, caption: str) -> str:
        """Store `figure` under `name` in the page's style; return the captioned element it is drawn into."""
        figure.update_layout(font={"family": FONT, "size": 12}, margin={"t": 48, "r": 24, "b": 48, "l": 24},
                             legend={"orientation": "h", "y": -0.15})
        data = json.loads(figure.to_json())
        data["layout"].pop("template", None)   # one shared copy (`template` in the page's data)
        self.figures[name] = data
        return (f'<figure><div class="chart" data-chart="{_e(name)}"></div>'
                f'<figcaption>{_e(caption)}</figcaption></figure>')

    def payload(self) -> JSON:
        """Return what page.js draws the charts from: the figures, the shared template and plotly's config."""
        return {"figures": self.figures, "template": _template(), "config": PLOTLY_CONFIG}


def _error(lo: Sequence[Optional[float]], mid: Sequence[Optional[float]], hi: Sequence[Optional[float]]) -> dict:
    """Asymmetric error bars from interval bounds (none where a bound is missing)."""
    plus = [None if h is None or m is None else h - m for h, m in zip(hi, mid)]
    minus = [None if lo_ is None or m is None else m - lo_ for lo_, m in zip(lo, mid)]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus}


def _color(run: int) -> str:
    return RUN_COLORS[run % len(RUN_COLORS)]


def _bar_height(groups: int, runs: int) -> int:
    return max(260, 110 + groups * (14 * runs + 10))


# ---- 1. provenance -----------------------------------------------------------------------------


def _provenance(runs: Sequence[RunRecord], names: Sequence[str], labels: Sequence[str]) -> Section:
    columns = [provenance_rows(run, name) for run, name in zip(runs, names)]
    head = "<tr><th></th>" + "".join(f"<th>{_e(label)}</th>" for label in labels) + "</tr>"
    rows = [f"<tr><th>{_e(key)}</th>" + _cells((col[i][1] for col in columns), "wrap") + "</tr>"
            for i, (key, _) in enumerate(columns[0])]
    warnings = "".join(
        f"<details><summary>{_e(label)}: {len(run.warnings)} warning(s)</summary><ul>"
        + "".join(f"<li>{_e(w)}</li>" for w in run.warnings) + "</ul></details>"
        for run, label in zip(runs, labels) if run.warnings)
    return Section("runs", "Runs", _table("provenance", head, rows) + warnings)


# ---- 2. headline scores ------------------------------------------------------------------------


def _metric_name(score: SpecScore) -> str:
    return f"{score.aggregation}({score.metric})" if score.aggregation else score.metric


def _spec_cells(runs: Sequence[RunRecord], spec: str, scores: Sequence[Optional[SpecScore]],
                errors: ErrorTable) -> str:
    out = []
    for i, (run, score) in enumerate(zip(runs, scores)):
        if score is None:
            out.append(_cells(("—", "—", "—")))
        else:
            out.append(_cells((_fmt(score.score), _interval(*spec_interval(i, run, spec, score, errors)),
                               score.num_instances)))
    return "".join(out)


def _spec_rows(runs: Sequence[RunRecord], errors: ErrorTable) -> list[str]:
    specs = list(dict.fromkeys(spec for run in runs for spec in run.primary_scores))
    rows = []
    for spec in specs:
        scores = [run.primary_scores.get(spec) for run in runs]
        first = next(s for s in scores if s is not None)
        rows.append(f'<tr class="spec"><td>{_e(spec)}</td><td>{_e(_metric_name(first))}</td>'
                    + _spec_cells(runs, spec, scores, errors) + "</tr>")
        for member in first.members:
            parts = [None if s is None else s.members.get(member) for s in scores]
            shown = next(p for p in parts if p is not None)
            rows.append(f'<tr class="member"><td>{_e(member)}</td><td>{_e(_metric_name(shown))}</td>'
                        + _spec_cells(runs, member, parts, errors) + "</tr>")
    return rows


def _group_head(first: Sequence[str], labels: Sequence[str], columns: Sequence[str]) -> str:
    """Two header rows: the fixed columns, then one group of `columns` per run."""
    span = len(columns)
    top = ("<tr>" + "".join(f'<th rowspan="2">{_e(c)}</th>' for c in first)
           + "".join(f'<th colspan="{span}" class="group">{_e(label)}</th>' for label in labels) + "</tr>")
    return top + "<tr>" + "".join(f'<th class="num">{_e(c)}</th>' for c in columns) * len(labels) + "</tr>"


def _task_cells(task: Optional[TaskRecord], err: Optional[TaskError]) -> str:
    if task is None:
        return _cells(("—",) * 4)
    if err is None:   # a corpus metric: the score only
        return _cells((_fmt(task.primary_score, 4), "—", "—", task.num_instances))
    n = str(err.n) if err.clusters == err.n else f"{err.n} / {err.clusters}"
    return _cells((_fmt(err.mean), _interval(*err.interval(clustered=True)), _interval(*err.interval(clustered=False)),
                   n))


def _task_rows(runs: Sequence[RunRecord], errors: ErrorTable) -> list[str]:
    rows = []
    for name in task_names(runs):
        first = first_task(runs, name)
        cells = "".join(_task_cells(run.tasks.get(name), errors.get((i, name))) for i, run in enumerate(runs))
        rows.append(f"<tr><td>{_e(name)}</td><td>{_e(first.kind)}</td><td>{_e(first.primary_metric)}</td>{cells}</tr>")
    return rows


def _scores_chart(runs: Sequence[RunRecord], labels: Sequence[str], errors: ErrorTable, charts: Charts) -> str:
    names = [n for n in task_names(runs) if any(errors.get((i, n)) for i in range(len(runs)))]
    if not names:
        return ""
    fig = go.Figure()
    for i, label in enumerate(labels):
        lo, means, hi = zip(*(_bounds(errors.get((i, n))) for n in names))
        fig.add_trace(go.Scatter(x=means, y=[_t(n) for n in names], mode="markers", name=label, orientation="h", marker_color=_color(i),
                                 error_x=_error(lo, means, hi),
                                 hovertemplate="%{y}<br>%{x:.3f}<extra>" + label + "</extra>"))
    fig.update_layout(title="Primary score per task, clustered 95% interval", scattermode="group",
                      height=_bar_height(len(names), 1), yaxis={"autorange": "reversed", "automargin": True})
    return charts.add("scores", fig, "Each task's primary metric with its clustered 95% interval (Wilson for "
                      "values in [0, 1], else ± 1.96 clustered standard errors).")


def _headline(runs: Sequence[RunRecord], labels: Sequence[str], legend: Sequence[str], errors: ErrorTable,
              cluster_by: Optional[str], charts: Charts) -> Section:
    specs = _table("specs", _group_head(("spec", "metric"), labels, ("score", "95% CI", "n")), _spec_rows(runs, errors))
    tasks = _table("tasks", _group_head(("task", "kind", "metric"), labels,
                                        ("score", "95% CI clustered", "95% CI naive", "n")), _task_rows(runs, errors))
    grouping = (f"documents sharing a {cluster_by}" if cluster_by
                else "the documents of a passage the task declares")
    note = (f'<p class="note">Requested specs: the headline score with the 95% interval of its recorded standard '
            f"error. Tasks: the primary metric's mean with two 95% intervals: clustered (the samples of one "
            f"question are one cluster, as are {_e(grouping)}) and naive (every unit independent); n: units "
            f"scored (units / clusters where they differ). A mean of values in [0, 1] (accuracy, pass@1) gets a "
            f"Wilson score interval, at the effective sample size of its error, so it stays within [0, 1]; "
            f"any other metric ± 1.96 standard errors.</p>")
    count = len(task_names(runs))
    if count > FOLDED_TASKS:   # a suite of many tasks: the chart shows them; the table opens on demand
        tasks = f"<details><summary>All {count} tasks</summary>{tasks}</details>"
    return Section("scores", "Scores", specs + _scores_chart(runs, legend, errors, charts) + tasks + note)


# ---- 3. breakdowns ------------------------------------------------------------------------------


def _breakdown_chart(breakdown: Breakdown, labels: Sequence[str], charts: Charts) -> str:
    family, column, per_run = breakdown.family, breakdown.column, breakdown.per_run
    groups = sorted({g for counts in per_run for g in counts})
    fig = go.Figure()
    for i, (label, counts) in enumerate(zip(labels, per_run)):
        found = [counts.get(g) for g in groups]
        acc = [None if a is None else a.accuracy for a in found]
        bounds = [(None, None) if a is None else a.interval() for a in found]
        fig.add_trace(go.Bar(
            x=acc, y=[_t(g) for g in groups], orientation="h", name=label, marker_color=_color(i),
            error_x=_error([b[0] for b in bounds], acc, [b[1] for b in bounds]),
            customdata=[[0, 0] if a is None else [a.correct, a.n] for a in found],
            hovertemplate="%{y}: %{x:.3f} (%{customdata[0]} of %{customdata[1]})<extra>" + label + "</extra>"))
    fig.update_layout(title=f"{_t(family)}: accuracy per {column.replace('_', ' ')}", barmode="group",
                      height=_bar_height(len(groups), len(per_run)),
                      xaxis={"range": [0, 1], "title": "accuracy (95% Wilson interval)"},
                      yaxis={"autorange": "reversed", "automargin": True})
    return charts.add(f"breakdown:{family}", fig,
                      f"Share of {family} items right by the primary metric, per {column} (sidecar), "
                      "with 95% Wilson intervals.")


def _breakdowns(runs: Sequence[RunRecord], labels: Sequence[str], charts: Charts) -> Optional[Section]:
    parts = [_breakdown_chart(breakdown, labels, charts) for breakdown in breakdowns(runs)]
    return Section("breakdown", "Breakdowns", "".join(parts)) if parts else None


# ---- 4. two runs: the paired comparison and the flipped items -------------------------------------


def _paired_rows(rows: Sequence[Mapping[str, JSON]]) -> list[str]:
    out = []
    for r in rows:
        same = f"{r['identical'] / r['n']:.1%}" if r["n"] else "—"
        values = (r["n"], same, _fmt(r["a_score"]), _fmt(r["b_score"]), f"{r['diff']:+.4f}",
                  _diff_interval(r["diff_ci95"], r["a_only"] is not None),
                  _interval(r["diff_ci95_bootstrap"][0], r["diff_ci95_bootstrap"][1], 4),
                  TESTS.get(r["test"], r["test"]), _fmt(r["p_value"], 4), _fmt(r["p_holm"], 4), _fmt(r["mde80"], 4),
                  "—" if r["a_only"] is None else f'{r["a_only"]} / {r["b_only"]}', r["clusters"])
        out.append(f'<tr class="{_e(r["kind"])}"><td>{_e(r["task"])}</td><td>{_e(r["kind"])}</td>'
                   f'<td>{_e(r["metric"])}</td>{_cells(values)}</tr>')
    return out


def _forest(rows: Sequence[Mapping[str, JSON]], charts: Charts) -> str:
    names = [_t(("suite: " if r["kind"] == "suite" else "") + r["task"]) for r in rows]
    diffs = [finite(r["diff"]) for r in rows]
    fig = go.Figure()
    for key, title in (("diff_ci95", "95% CI (clustered, analytic)"), ("diff_ci95_bootstrap", "95% CI (bootstrap)")):
        lo = [finite(max(-1.0, r[key][0]) if r["a_only"] is not None else r[key][0]) for r in rows]
        hi = [finite(min(1.0, r[key][1]) if r["a_only"] is not None else r[key][1]) for r in rows]
        fig.add_trace(go.Scatter(x=diffs, y=names, mode="markers", name=title, orientation="h", error_x=_error(lo, diffs, hi),
                                 hovertemplate="%{y}: %{x:+.4f}<extra>" + title + "</extra>"))
    fig.add_vline(x=0, line_dash="dash", line_color="#888")
    fig.update_layout(title="B − A per task and suite", scattermode="group", height=_bar_height(len(rows), 2),
                      xaxis={"title": "B − A", "zeroline": False}, yaxis={"autorange": "reversed", "automargin": True})
    return charts.add("paired", fig, "Paired difference of the primary metric (B − A) with its analytic "
                      "(clustered standard error) and its paired-bootstrap 95% interval; dashed: no difference.")


def _paired(comparison: Optional[Sequence["TaskComparison"]], names: Sequence[str], charts: Charts) -> Section:
    who = f'<p class="note">A = {_e(names[0])}<br>B = {_e(names[1])}</p>'
    if not comparison:
        return Section("paired", "Paired comparison", who + '<p class="note">No paired comparison: the two runs '
                        "share no task with documents scored in both.</p>")
    rows = paired_rows(comparison)   # suites first
    columns = ("task", "kind", "metric", "n", "same", "A", "B", "B − A", "95% CI", "bootstrap 95% CI", "test",
               "p", "p Holm", "MDE80", "A only / B only", "clusters")
    head = "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"
    by = rows[0].get("cluster_by")
    note = ('<p class="note">same: identical predictions; A only / B only: documents right in one run only '
            "(0/1 metrics); 95% CI: B − A ± 1.96 clustered paired standard errors, for 0/1 metrics clipped to "
            "[−1, 1] (the bootstrap's percentiles stay there); p: exact McNemar (0/1 metrics, no clusters) or "
            "Wald on the clustered error (the test column); p Holm: adjusted across the tasks (suites apart); MDE80: the smallest |B − A| this n detects with 80% "
            "power" + (f"; documents clustered by {_e(by)}" if by else "") + ".</p>")
    table = _table("paired", head, _paired_rows(rows))
    suites = [r for r in rows if r["kind"] == "suite"]
    if len(rows) > FOLDED_TASKS and suites:   # many tasks: their suites shown, every row on demand
        table = (_table("paired-suites", head, _paired_rows(suites))
                 + f"<details><summary>All {len(rows) - len(suites)} tasks</summary>{table}</details>")
    return Section("paired", "Paired comparison", who + table + note + _forest(rows, charts))


def _item_list(list_id: str, labels: Sequence[str], *, flipped_toggle: bool) -> str:
    """Lay out the controls and the empty table that page.js fills (see `renderList` there)."""
    toggle = ('<label><input type="checkbox" data-role="flipped"> flipped only</label>' if flipped_toggle else "")
    head = ("<tr><th>task</th><th>item</th><th>gold</th>"
            + "".join(f"<th>{_e(label)}</th>" for label in labels) + "</tr>")
    return (f'<div class="item-list" data-source="{"flips" if list_id == "flips" else "items"}">'
            '<div class="controls"><select data-role="task" aria-label="task"></select>'
            '<input type="search" data-role="filter" placeholder="filter: any text of the item" aria-label="filter">'
            f'{toggle}</div>{_table(list_id, head, ())}'
            '<div class="pager"><button type="button" data-role="prev">← previous</button>'
            '<span data-role="page"></span><button type="button" data-role="next">next →</button></div></div>')


def _flips(count: int, labels: Sequence[str]) -> Section:
    intro = (f'<p class="note">{count} item(s) whose primary metric differs between A and B; click one to open '
             "its prompt, its choices with both runs' log-probabilities (or its samples), and the gold.</p>")
    return Section("flips", "Flipped items", intro + (_item_list("flips", labels, flipped_toggle=False) if count else ""))


# ---- 5. score curves ------------------------------------------------------------------------------


def _curves(runs: Sequence[RunRecord], labels: Sequence[str], errors: ErrorTable, charts: Charts) -> Optional[Section]:
    found = curve_order(runs)
    if found is None:
        return None
    order, steps = found
    by_step = steps is not None
    x: Sequence[Union[str, float]] = steps if steps is not None else [labels[i] for i in order]
    fig = go.Figure()
    for name in task_names(runs):
        errs = [errors.get((i, name)) for i in order]
        if not any(errs):
            continue
        lo, means, hi = zip(*(_bounds(e) for e in errs))
        fig.add_trace(go.Scatter(x=x, y=means, mode="lines+markers", name=_t(name), error_y=_error(lo, means, hi)))
    if not fig.data:
        return None
    fig.update_layout(title="Primary score per task across the runs", height=460,
                      xaxis={"title": "step" if by_step else "run", "type": "linear" if by_step else "category"},
                      yaxis={"title": "score (clustered 95% interval)"})
    how = "ordered by their `step` label" if by_step else "in the order given"
    return Section("curves", "Score curves", charts.add(
        "curves", fig, f"Each task's primary metric across the runs ({how}), with its clustered 95% interval."))


# ---- 6. calibration ------------------------------------------------------------------------------


def _calibration(runs: Sequence[RunRecord], labels: Sequence[str], charts: Charts) -> Optional[Section]:
    options = calibration_points(runs)
    if not options:
        return None
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                               line={"dash": "dash", "color": "#888"}, hoverinfo="skip"))
    titles, masks = [], []
    for k, (option, points) in enumerate(options.items()):
        eces = []
        for i, (label, pts) in enumerate(zip(labels, points)):
            found, ece = reliability(pts)
            eces.append(f"{label} {_fmt(ece)}")
            acc = [r.accuracy for r in found]
            bounds = [r.interval() for r in found]
            fig.add_trace(go.Scatter(
                x=[r.confidence for r in found], y=acc, mode="lines+markers", name=label, visible=k == 0,
                marker_color=_color(i), line_color=_color(i),
                error_y=_error([b[0] for b in bounds], acc, [b[1] for b in bounds]),
                customdata=[[r.correct, r.n] for r in found],
                hovertemplate="confidence %{x:.2f}: %{y:.3f} right (%{customdata[0]} of %{customdata[1]})"
                              "<extra>" + label + "</extra>"))
        titles.append(f"Calibration: {_t(option)} (ECE {', '.join(eces)})")
        masks.append([k] * len(labels))
    flat = [k for mask in masks for k in mask]
    buttons = [{"label": _t(option), "method": "update",
                "args": [{"visible": [True] + [k == i for k in flat]}, {"title.text": titles[i]}]}
               for i, option in enumerate(options)]
    fig.update_layout(title=titles[0], height=480, xaxis={"range": [0, 1], "title": "probability of the most likely choice"},
                      yaxis={"range": [0, 1.02], "title": "share right (95% Wilson interval)"},
                      updatemenus=[{"buttons": buttons, "x": 1, "xanchor": "right", "y": 1.12}] if len(options) > 1
                      else [])
    return Section("calibration", "Calibration", charts.add(
        "calibration", fig, f"Reliability of choice tasks: the model's probability of its most likely choice "
        f"(softmax over the choices' summed log-probabilities) in {CALIBRATION_BINS} equal-width bins, against "
        "the share of those choices that are right (acc_raw, whatever the task's primary metric); ECE: the "
        "expected calibration error. Choose a task in the menu."))


# ---- 7. generation diagnostics ------------------------------------------------------------------


def _generation(runs: Sequence[RunRecord], labels: Sequence[str], charts: Charts) -> Optional[Section]:
    names = [n for n in task_names(runs) if first_task(runs, n).kind == "generation"]
    if not names:
        return None
    found = [(n, label, generation_counts(run.tasks[n])) for n in names for run, label in zip(runs, labels)
             if n in run.tasks]
    reasons = finish_reasons(c for *_, c in found)
    columns = ("task", "run", "samples", *reasons, "extraction failed", "of them cut at length", "sandbox outcomes")
    rows = []
    for name, label, c in found:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(c.outcomes.items())) or "—"
        failed = (c.extraction_failed, c.failed_at_length) if c.extracts else ("—", "—")
        rows.append(f"<tr><td>{_e(name)}</td><td>{_e(label)}</td>"
                    + _cells((c.samples, *(c.finish.get(r, 0) for r in reasons), *failed)) + _cells((outcomes,), "")
                    + "</tr>")
    head = "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"
    fig = go.Figure()
    x = [[_t(n) for n, _, _ in found], [label for _, label, _ in found]]
    for reason in reasons:
        fig.add_trace(go.Bar(x=x, y=[c.finish.get(reason, 0) for *_, c in found], name=reason,
                             marker_color=FINISH_COLORS.get(reason)))
    fig.update_layout(title="Why generation stopped", barmode="stack", height=420, yaxis={"title": "samples"})
    chart = charts.add("finish-reasons", fig, "Samples per finish reason: stop (a stop sequence), eos (the "
                       "end-of-sequence token), length (cut off at max_gen_toks).")
    return Section("generation", "Generation diagnostics", _table("generation", head, rows) + chart)


# ---- 8. the items ---------------------------------------------------------------------------------


def _items(labels: Sequence[str], count: int, two: bool) -> Section:
    intro = (f'<p class="note">{count} item(s). Filter by task or by any text of the item (its prompt, '
             "answers, samples); click a row to open it.</p>")
    return Section("items", "Items", intro + _item_list("items", labels, flipped_toggle=two))


# ---- the page ------------------------------------------------------------------------------------


def _digest(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"


def _page(title: str, sections: Sequence[Section], charts: Charts, data: JSON) -> str:
    scripts = (_plotly_js(), _page_js())
    # only these two scripts may run (plotly.js once page.js unpacked it); nothing may be fetched (the
    # page works offline by construction)
    policy = ("default-src 'none'; script-src " + " ".join(_digest(s) for s in scripts)
              + "; style-src 'unsafe-inline'; img-src data: blob:; font-src data:")
    nav = "".join(f'<a href="#{_e(s.key)}-section">{_e(s.title)}</a>' for s in sections)
    return "".join((
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        f'<meta name="generator" content="{GENERATOR} {_e(VERSION)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_page_css()}</style></head><body>",
        f"<header><h1>{_e(title)}</h1><nav>{nav}</nav></header><main>", *(s.html() for s in sections), "</main>",
        f'<script type="application/json" id="report-charts">{_script_json(charts.payload())}</script>',
        f'<script type="application/json" id="report-data">{_script_json(data)}</script>',
        f'<script type="application/gzip;base64" id="plotly-packed">{_plotly_packed()}</script>',
        f"<script>{_page_js()}</script></body></html>\n",
        f"<!-- {OWNED_MARK} -->\n"))   # last: the file's own proof that proctor wrote it, unchanged


def render_report(runs: Sequence[RunRecord], names: Sequence[str],
                  comparison: Optional[Sequence["TaskComparison"]] = None, cluster_by: Optional[str] = None, *,
                  prompts: Optional[Mapping[str, Mapping[str, Prompt]]] = None) -> str:
    """Render the report's HTML.

    `names`: each run's name (its directory); `comparison`: two runs'
    `proctor.compare.compare_runs`; `prompts`: task -> query_id -> Prompt (`read_run_prompts`);
    `cluster_by`: a sidecar column whose groups are clusters in the headline intervals.
    """
    if not runs or len(names) != len(runs):
        raise ValueError(f"need one name per run, got {len(names)} names for {len(runs)} runs")
    if cluster_by is not None and cluster_by not in CLUSTER_COLUMNS:
        raise UserError(f"cannot cluster by {cluster_by!r}; choose one of {', '.join(CLUSTER_COLUMNS)}")
    names = _unique(names)
    labels = run_labels(len(runs))
    legend = [_t(f"{label}: {Path(name).name or name}") for label, name in zip(labels, names)]   # charts' run names
    charts = Charts()
    errors = task_errors(runs, cluster_by)
    data = item_data(runs, prompts or {})
    two = len(runs) == 2
    sections: list[Optional[Section]] = [   # what was found first, how it was run last
        _headline(runs, labels, legend, errors, cluster_by, charts),
        _paired(comparison, names, charts) if two else None,
        _flips(len(data["flips"]), labels) if two else None,
        _curves(runs, legend, errors, charts),
        _breakdowns(runs, legend, charts),
        _calibration(runs, legend, charts),
        _generation(runs, labels, charts),
        _items(labels, len(data["items"]), two),
        _provenance(runs, names, labels),
    ]
    data["runs"] = labels
    title = "proctor report: " + (names[0] if len(names) == 1 else f"{len(names)} runs")
    return _page(title, [s for s in sections if s is not None], charts, data)


def read_run_prompts(run_dir: Union[str, Path, CheckedDirectory], run: RunRecord) -> dict[str, dict[str, Prompt]]:
    """Read task -> query_id -> Prompt from each task's requests.jsonl (`--save-requests`).

    `run_dir`: the run directory, or it opened (`open_run`) to read edited files. A task
    without the file (or, read with `allow_edited`, with one that is not JSON Lines) is left out.
    """
    files = run_dir if isinstance(run_dir, CheckedDirectory) else open_run(run_dir)
    found = {name: read_prompts(files, f"{task_dir_name(name)}/{REQUESTS_FILE}") for name in run.tasks}
    return {name: prompts for name, prompts in found.items() if prompts is not None}


def _check_output(output: Path, overwrite: bool) -> None:
    """Refuse, before any work, to replace a file proctor did not write.

    Without `overwrite`, a report proctor did write is refused too.
    """
    from proctor.outputs.owned import check_output_file

    check_output_file(output, option="report")
    if output.exists() and not overwrite:
        raise UserError(f"report {output} holds an earlier proctor report; pass {asked_as('overwrite')} "
                        "to replace it, or choose a new path")


def write_report(run_dirs: Sequence[Union[str, Path]], output: Union[str, Path], *, cluster_by: Optional[str] = None,
                 overwrite: bool = False, allow_edited: bool = False) -> str:
    """Write the HTML report of `run_dirs` to `output`, atomically; return its size, said (`size_note`).

    The report carries its own proctor-owned mark (so that only proctor's own report is ever
    replaced). Two runs also get the paired comparison; UserError for a run
    proctor cannot read (`allow_edited`: as `proctor.read_run`).
    """
    from proctor.outputs.owned import write_owned_file

    if not run_dirs:
        raise UserError("the report needs at least one run directory")
    if cluster_by is not None and cluster_by not in CLUSTER_COLUMNS:
        raise UserError(f"cannot cluster by {cluster_by!r}; choose one of {', '.join(CLUSTER_COLUMNS)}")
    output = Path(os.path.abspath(output))
    _check_output(output, overwrite)
    dirs = [open_run(d, allow_edited=allow_edited) for d in run_dirs]
    runs = [read_run_files(d) for d in dirs]
    prompts: dict[str, dict[str, Prompt]] = {}
    for directory, run in zip(dirs, runs):
        for task, by_id in read_run_prompts(directory, run).items():
            prompts.setdefault(task, by_id)
    comparison = None
    if len(runs) == 2:
        from proctor.compare import compare_records

        try:
            comparison = compare_records(runs[0], runs[1], cluster_by, names=(str(dirs[0].path), str(dirs[1].path)))
        except UserError:   # runs of different specs: the report says there is no paired comparison
            comparison = None
    text = render_report(runs, [str(d) for d in run_dirs], comparison, cluster_by, prompts=prompts)
    data = text.encode("utf-8", errors="replace")
    write_owned_file(output, data, option="report")
    return size_note(len(data))


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.0f} kB"


def size_note(size: int) -> str:
    """Say what a report of `size` bytes holds, e.g. "2.0 MB: plotly.js 1.4 MB gzipped, ...".

    Most of a small report is the chart library, inlined once (gzipped and in base64) so that
    the file opens offline; the rest is the runs' data and the page.
    """
    plotly = len(_plotly_packed())
    return f"{_megabytes(size)}: plotly.js {_megabytes(plotly)} (gzipped, inlined once), runs and page " \
           f"{_megabytes(size - plotly)}"
