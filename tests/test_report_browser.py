"""The HTML report of two real runs (SmolLM2-135M-Instruct few-shot and zero-shot), opened from
disk in headless Chromium: every chart drawn, no error, nothing fetched, the flipped items
open to their choices, the item browser pages; a full-page screenshot is saved beside it.

Needs Debian's /usr/bin/chromium (skipped without it, unless PROCTOR_REQUIRE_BROWSER=1).
The README's screenshots come from `benchmarks/report_screenshot.py`."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

import proctor
from proctor.report.analysis import PAGE_SIZE
from proctor.report.html import write_report
from test_report_html import CHOICE_SPECS, GSM8K, Page

CHROMIUM = Path(os.environ.get("PROCTOR_CHROMIUM", "/usr/bin/chromium"))
LIMIT = 11      # 4 choice tasks and GSM8K: 55 items, more than one page
CHARTS = ["scores", "paired", "breakdown:mmlu:mc::olmes", "breakdown:socialiqa:mc::olmes",
          "breakdown:socialiqa:rc::olmes", "calibration", "finish-reasons"]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        if os.environ.get("PROCTOR_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PROCTOR_REQUIRE_BROWSER=1 but there is no browser at {CHROMIUM}")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory, data_dir):
    """Two real runs of SmolLM2-135M-Instruct on the same items: few-shot as the specs say, and
    zero-shot (GSM8K cut to 32 new tokens: greedy texts of 512 tokens cost minutes here)."""
    from proctor.backends.hf import load_backend
    from proctor.tasks import gsm8k

    root = tmp_path_factory.mktemp("browser")
    backend = load_backend("smollm2-135m", device="cpu", max_length=2048)
    runs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(gsm8k.VARIANTS, GSM8K, dataclasses.replace(gsm8k.VARIANTS[GSM8K], max_gen_toks=32))
        for name, shots in (("few-shot", None), ("zero-shot", 0)):
            proctor.evaluate(backend, tasks=[*CHOICE_SPECS, GSM8K], limit=LIMIT, num_fewshot=shots,
                             data_dir=data_dir, output=root / name, save_requests=True, cache=False, progress=False)
            runs.append(root / name)
    out = root / "report.html"
    write_report(runs, out)
    return out


@pytest.mark.slow
def test_the_report_of_two_runs_works_in_a_browser(browser, report, tmp_path):
    page_data = Page(report.read_text(encoding="utf-8"))
    assert page_data.charts() == CHARTS
    data = page_data.json("report-data")
    items, flips = len(data["items"]), len(data["flips"])
    assert items == 5 * LIMIT > PAGE_SIZE and flips > 0

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems, fetched = [], []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("request", lambda r: fetched.append(r.url))
    page.goto(report.as_uri())
    page.wait_for_function("() => [...document.querySelectorAll('div.chart')]"
                           ".every(div => div.querySelector('.main-svg'))", timeout=20_000)
    assert page.locator("div.chart").count() == len(CHARTS)
    assert page.locator("#tasks tbody tr").count() == 5
    assert page.locator("#paired tbody tr").count() == 5
    assert page.locator("#generation tbody tr").count() == 2

    # the calibration menu switches to one task's bins (the diagonal and one trace per run stay)
    switched = page.evaluate("""async () => {
        const div = document.querySelector('div.chart[data-chart=calibration]');
        const buttons = div.layout.updatemenus[0].buttons;
        await Plotly.update(div, ...buttons[1].args);
        return [buttons.length, div.querySelector('.gtitle').textContent,
                div.data.filter(t => t.visible !== false).length];
    }""")
    assert switched == [1 + 4, switched[1], 1 + 2] and switched[1].startswith("Calibration: mmlu_abstract_algebra")

    # a flipped item opens to its choices, with both runs' log-probabilities and the gold marked
    flipped = page.locator("#flips tbody tr.item").first
    flipped.click()
    detail = page.locator("#flips tbody tr.detail")
    assert detail.count() == 1
    choices = detail.locator("table.choices tbody tr")
    assert choices.count() >= 2 and detail.locator("table.choices tr.gold").count() == 1
    assert detail.locator("table.choices thead th").count() == 2 + 2 * 2
    flipped.click()
    assert page.locator("#flips tbody tr.detail").count() == 0

    # the item browser: 50 rows a page, the next page holds the rest, the filter finds one item
    rows = page.locator("#items tbody tr.item")
    assert rows.count() == PAGE_SIZE
    first = rows.first.get_attribute("data-item")
    browser_list = page.locator("div.item-list[data-source=items]")
    browser_list.locator("[data-role=next]").click()
    assert rows.count() == items - PAGE_SIZE and rows.first.get_attribute("data-item") != first
    assert "page 2 of 2" in browser_list.locator("[data-role=page]").inner_text()
    browser_list.locator("[data-role=prev]").click()
    assert rows.first.get_attribute("data-item") == first
    generation = next(i for i in data["items"] if data["tasks"][i["t"]]["name"] == GSM8K)
    browser_list.locator("[data-role=filter]").fill(generation["q"])
    page.wait_for_function("() => document.querySelectorAll('#items tbody tr.item').length === 1")
    rows.first.click()
    assert page.locator("#items tr.detail .samples details").count() == 2      # one sample per run
    browser_list.locator("[data-role=filter]").fill("")
    browser_list.locator("[data-role=flipped]").check()
    page.wait_for_function(f"() => document.querySelectorAll('#items tbody tr.item').length === {min(flips, 50)}")

    flipped.click()   # open again, for the screenshot
    target = report.parent / "report.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target), full_page=True)
    assert problems == []
    assert all(url.startswith(("file:", "data:", "blob:", "about:")) for url in fetched), fetched
