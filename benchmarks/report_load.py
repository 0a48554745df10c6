"""How a large run's report behaves: two runs of `socialiqa:mc::xlarge` (10,000 questions,
prompts saved), written by the real pipeline with two tiny random models (the model does
not matter to the report, only the records do), then `proctor report` and the page opened
in headless Chromium (Debian's /usr/bin/chromium) until every chart is drawn and the item
browser's first page is filled, then the next page.

    python benchmarks/report_load.py [--limit 10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SPEC = "socialiqa:mc::xlarge"
DRAWN = "[...document.querySelectorAll('.chart')].every(c => c.querySelector('.main-svg'))"
FILLED = "document.querySelectorAll('#items tbody tr').length > 0"


def make_runs(root: Path, limit: int, data_dir: str) -> list[Path]:
    import proctor
    from tests.tinylm import build_tiny_model

    runs = []
    for seed in (0, 1):
        model = build_tiny_model(root / f"model-{seed}", seed=seed)
        out = root / f"run-{seed}"
        t0 = time.perf_counter()
        proctor.evaluate(str(model), tasks=[SPEC], limit=limit, data_dir=data_dir, output=out, save_requests=True,
                         cache=False, progress=False)
        print(f"run {seed}: {time.perf_counter() - t0:.1f} s")
        runs.append(out)
    return runs


def open_in_chromium(report: Path, chromium: str) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        t0 = time.perf_counter()
        page.goto(report.resolve().as_uri())
        page.wait_for_function(DRAWN, timeout=120_000)
        page.wait_for_function(FILLED, timeout=120_000)
        loaded = time.perf_counter() - t0
        first = page.locator("#items tbody tr").first.inner_text()
        t1 = time.perf_counter()
        page.locator("#items-section [data-role=next]").click()
        page.wait_for_function(f"document.querySelector('#items tbody tr').innerText !== {first!r}")
        paged = time.perf_counter() - t1
        browser.close()
    if errors:
        raise SystemExit(f"page errors: {errors}")
    return {"load_s": loaded, "next_page_s": paged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=10_000)
    parser.add_argument("--data-dir", default=os.environ.get("PROCTOR_DATA_DIR", str(REPO.parent / "shared" / "data")))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--keep", type=Path, help="make the runs and the report here (default: a temporary dir)")
    args = parser.parse_args()
    from proctor.report.html import write_report

    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        runs = make_runs(root, args.limit, args.data_dir)
        report = root / "report.html"
        t0 = time.perf_counter()
        write_report(runs, report, overwrite=True)
        written = time.perf_counter() - t0
        size = report.stat().st_size / 1e6
        timings = open_in_chromium(report, args.chromium)
    print(f"{args.limit} items x 2 runs: report written in {written:.1f} s ({size:.1f} MB); "
          f"Chromium: charts drawn and first page shown {timings['load_s']:.1f} s after opening, "
          f"next page {timings['next_page_s']:.2f} s")


if __name__ == "__main__":
    main()
