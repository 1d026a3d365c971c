"""The README's picture of the report: reports/report.html rendered by headless Chromium
(Debian's chromium and chromedriver, driven by Selenium as tests/test_browser.py drives them),
its top saved as docs/report.png.

    .venv/bin/python scripts/report_picture.py            # after `dvc repro`; `make repro` runs it

`make repro` runs it after the pipeline, so the picture follows the report. Where Chromium or
Selenium is missing it says so and leaves the picture as it is: the pipeline never depends on a
browser. The picture shows a newcomer what their first `make repro` gives, so it is drawn only from
a report whose model is the store's first registered version (a fresh clone's run); a long-lived
store's report (a champion from earlier runs, older gates) is named and the picture left as it is.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("report-picture")
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# Without the network flags Chromium keeps calling Google's hosts, which are unreachable here.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--hide-scrollbars")


def missing() -> str | None:
    """Why no picture can be taken here, or None."""
    absent = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401  the test extra, which `make install` installs
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def not_a_first_run(metrics: Path) -> str | None:
    """Why the report beside `metrics` is not what a fresh clone's `make repro` shows, or None."""
    if not metrics.is_file():
        return f"{metrics} not found"
    registry = json.loads(metrics.read_text()).get("registry") or {}
    version = registry.get("version")
    if version != 1:
        return (f"its model is version {version} of a store with earlier runs ({metrics}: registry), "
                "not a fresh clone's first")
    return None


def render(html: Path, out: Path, width: int, height: int) -> None:
    """The top width × height pixels of the page, as a PNG written atomically."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        driver.get(html.resolve().as_uri())
        tmp = out.with_suffix(".tmp.png")
        if not driver.save_screenshot(str(tmp)):
            raise RuntimeError(f"Chromium took no screenshot of {html}")
        tmp.replace(out)
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", default="reports/report.html", help="the report to draw")
    parser.add_argument("--out", default="docs/report.png", help="the picture (PNG)")
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=1400)
    args = parser.parse_args(argv)
    html, out = Path(args.html), Path(args.out)
    if not html.is_file():
        log.error("%s not found: run `make repro` (or `dvc repro report`) first", html)
        return 1
    why = not_a_first_run(html.parent / "metrics.json")
    if why:
        log.warning("no picture of the report: %s; %s is left as it was (draw it from a fresh "
                    "clone: git clone <repo> fresh && cd fresh && make repro)", why, out)
        return 0
    why = missing()
    if why:
        log.warning("no picture of the report: %s; %s is left as it was", why, out)
        return 0
    render(html, out, args.width, args.height)
    log.info("wrote %s from %s", out, html)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    sys.exit(main())
