"""Screenshot of a proctor report in headless Chromium (Debian's /usr/bin/chromium), as the
README shows it: `python benchmarks/report_screenshot.py report.html docs/report.png`."""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("report", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--width", type=int, default=1280, help="the window's width in pixels (every table fits 1280)")
    parser.add_argument("--height", type=int, default=2600, help="pixels of the page to capture")
    parser.add_argument("--at", help="the id of the element to start from, e.g. paired-section")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(args.report.resolve().as_uri())
        page.wait_for_function("[...document.querySelectorAll('.chart')].every(c => c.querySelector('.main-svg'))")
        if args.at:
            page.locator(f"#{args.at}").scroll_into_view_if_needed()
            page.evaluate(f"document.getElementById({args.at!r}).scrollIntoView()")
        page.screenshot(path=str(args.png), full_page=False)
        browser.close()
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
