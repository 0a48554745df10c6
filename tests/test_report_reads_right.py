"""The report reads right (issue 37, item 8) and single-file outputs add nothing beside them
(item 7): intervals of a proportion stay within [0, 1] and a paired difference of 0/1 metrics
within [−1, 1], in the page and on the terminal; the file says its size and carries plotly.js
gzipped, once; a report or a comparison written into a directory is the only file there and
still replaces only its own unchanged self; every table fits a 1280-px window (Chromium)."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
from rich.console import Console

import proctor
from proctor.compare import compare_records
from proctor.metrics.stats import Z95, proportion_interval, wilson_interval
from proctor.outputs.owned import MANIFEST
from proctor.outputs.run_dir import write_run
from proctor.report.html import render_report, write_report
from proctor.report.terminal import print_agreement
from run_records import choice_record, run_record, task_record
from test_report_browser import browser  # noqa: F401  (the fixture: Chromium, or a skip/fail as that module says)

ALGEBRA, HISTORY = "mmlu_abstract_algebra:mc::olmes", "mmlu_high_school_european_history:mc::olmes"
INTERVAL = re.compile(r"\[(-?\d+\.\d+), (-?\d+\.\d+)\]")


def run_of(spec: str, right: int, n: int):
    """A run of one choice task whose first `right` of `n` documents are right."""
    return run_record(task_record(spec, [choice_record(spec, i, 0 if i < right else 1, [-1.0, -2.0, -1.5, -3.0])
                                         for i in range(n)], "choice"))


def intervals(html_text: str, table: str) -> list[tuple[float, float]]:
    body = re.search(rf'<table id="{table}">(.*?)</table>', html_text, re.S)
    assert body is not None, table
    return [(float(lo), float(hi)) for lo, hi in INTERVAL.findall(body.group(1))]


def test_wilson_at_the_effective_size_stays_within_0_1():
    se = math.sqrt(0.05 * 0.95 / 19)
    assert 0.05 - Z95 * se < 0                                  # the old mean ± 1.96 se
    lo, hi = proportion_interval(0.05, se, 20)
    assert 0 <= lo < 0.05 < hi <= 1
    assert proportion_interval(0.0, 0.0, 20) == wilson_interval(0, 20)
    assert proportion_interval(1.0, 0.0, 20) == wilson_interval(20, 20)
    wide = proportion_interval(0.15, 0.2, 20)                  # a large clustered error: few effective units
    assert 0 <= wide[0] and wide[1] <= 1 and wide[1] - wide[0] > 0.4
    assert all(math.isnan(v) for v in proportion_interval(math.nan, 0.1, 20))


def test_accuracy_intervals_in_the_report_stay_within_0_1():
    """1 of 20 right: mean ± 1.96 se would start at −0.048; every interval shown starts at 0 or above."""
    run = run_of(ALGEBRA, 1, 20)
    score = run.primary_scores[ALGEBRA]
    run = dataclasses.replace(run, primary_scores={ALGEBRA: dataclasses.replace(score, stderr=math.sqrt(.05 * .95 / 19))})
    text = render_report([run], ["r"])
    shown = intervals(text, "specs") + intervals(text, "tasks")
    assert len(shown) == 3 and all(0 <= lo <= hi <= 1 for lo, hi in shown)
    assert shown[2] == pytest.approx(wilson_interval(1, 20), abs=6e-4)   # naive: the ordinary Wilson interval
    charts = json.loads(re.search(r'id="report-charts">(.*?)</script>', text).group(1))
    trace = charts["figures"]["scores"]["data"][0]
    assert trace["x"][0] - trace["error_x"]["arrayminus"][0] >= 0


def test_paired_difference_of_0_1_metrics_stays_within_minus_1_1():
    """A right on 3 of 3, B on 1: B − A = −2/3 with se 1/3, so −2/3 − 1.96/3 < −1."""
    a, b = run_of(ALGEBRA, 3, 3), run_of(ALGEBRA, 1, 3)
    comparison = compare_records(a, b)
    assert comparison[0].diff_ci95[0] < -1                       # recorded as before (--json, the API)
    text = render_report([a, b], ["a", "b"], comparison)
    assert intervals(text, "paired")[0][0] == -1.0
    console = Console(width=200, record=True)
    print_agreement(comparison, "a", "b", console=console)
    assert "[-1.000, " in console.export_text()


@pytest.fixture()
def two_runs(tmp_path):
    write_run(run_of(ALGEBRA, 1, 20), tmp_path / "runs" / "a")
    write_run(run_of(ALGEBRA, 5, 20), tmp_path / "runs" / "b")
    return tmp_path / "runs" / "a", tmp_path / "runs" / "b"


def test_a_report_is_the_only_file_it_adds_and_says_its_size(two_runs, tmp_path):
    out = tmp_path / "here" / "report.html"
    out.parent.mkdir()
    note = write_report(list(two_runs), out)
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]
    size = out.stat().st_size
    assert note.startswith(f"{size / 1e6:.1f} MB: plotly.js ") and "gzipped" in note
    assert size < 2_500_000                                     # 4.9 MB with plotly.js inlined as is
    text = out.read_text(encoding="utf-8")
    from proctor.report.html import _plotly_js

    assert _plotly_js()[-300:] not in text and text.count('id="plotly-packed"') == 1   # once, gzipped
    with pytest.raises(proctor.UserError, match="overwrite"):
        write_report(list(two_runs), out)
    write_report(list(two_runs)[:1], out, overwrite=True)        # its own, unchanged: replaced
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]
    out.write_text(out.read_text(encoding="utf-8").replace("proctor report", "my report"), encoding="utf-8")
    edited = out.read_bytes()
    with pytest.raises(proctor.UserError, match="changed since"):
        write_report(list(two_runs), out, overwrite=True)
    assert out.read_bytes() == edited
    forged = tmp_path / "here" / "notes.html"                    # a mark copied into a user's file vouches for nothing
    forged.write_text("<p>mine</p>" + re.search(r"<!-- proctor-owned sha256:[0-9a-f]{64} -->", text).group(0))
    with pytest.raises(proctor.UserError, match="did not write"):
        write_report(list(two_runs), forged, overwrite=True)


def test_a_comparison_is_the_only_file_it_adds(two_runs, tmp_path, monkeypatch):
    from proctor.cli import main

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["compare", str(two_runs[0]), str(two_runs[1]), "--json", "cmp.json"]) == 0
    assert [p.name for p in here.iterdir()] == ["cmp.json"]
    doc = json.loads((here / "cmp.json").read_text())
    assert doc["written_by"].startswith("proctor-owned sha256:") and doc["comparisons"][0]["n"] == 20
    assert main(["compare", str(two_runs[1]), str(two_runs[0]), "--json", "cmp.json"]) == 0   # its own: replaced
    assert json.loads((here / "cmp.json").read_text())["run_a"] == str(two_runs[1])
    (here / "cmp.json").write_text((here / "cmp.json").read_text().replace('"n": 20', '"n": 21'))
    assert main(["compare", str(two_runs[0]), str(two_runs[1]), "--json", "cmp.json"]) == 2
    assert '"n": 21' in (here / "cmp.json").read_text() and not (here / MANIFEST).exists()


def test_a_file_listed_in_an_earlier_manifest_is_still_replaced(two_runs, tmp_path):
    """A report written by an earlier proctor (a manifest beside it, no mark) is proctor's."""
    from proctor.outputs.owned import write_owned_file

    out = tmp_path / "old" / "report.html"
    write_owned_file(out, b"<html>an older report</html>")
    assert (out.parent / MANIFEST).exists()
    write_report(list(two_runs), out, overwrite=True)
    listed = json.loads((out.parent / MANIFEST).read_text())["files"]["report.html"]
    assert listed == __import__("hashlib").sha256(out.read_bytes()).hexdigest()   # kept up to date


def test_every_table_fits_a_1280_px_window(browser, tmp_path):  # noqa: F811  (the imported fixture)
    """Two runs of two tasks with long names: the paired table's 16 columns, A only / B only last, fit;
    the charts are drawn (plotly.js unpacked and run under the page's policy)."""
    runs = []
    for name, right in (("a-run-directory-with-a-long-name", 2), ("b", 6)):
        record = run_record(*(task_record(spec, [choice_record(spec, i, 0 if i < right else 1, [-1.0, -2.0])
                                                 for i in range(10)], "choice") for spec in (ALGEBRA, HISTORY)))
        write_run(record, tmp_path / name)
        runs.append(tmp_path / name)
    out = tmp_path / "report.html"
    write_report(runs, out)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(out.as_uri())
    page.wait_for_function("() => [...document.querySelectorAll('div.chart')].every(d => d.querySelector('svg'))",
                           timeout=60_000)
    widths = page.evaluate("""() => [...document.querySelectorAll('table')].map(t => [t.id,
        t.getBoundingClientRect().right, t.closest('.scroll').getBoundingClientRect().right])""")
    assert {w[0] for w in widths} >= {"specs", "tasks", "paired", "provenance"}
    for table, right, box in widths:
        assert right <= box + 0.5 and right <= 1280, (table, right, box)
    last = page.locator("#paired thead th").last
    assert last.bounding_box()["x"] + last.bounding_box()["width"] <= 1280
    assert errors == []
    page.close()
