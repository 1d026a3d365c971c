"""Look at the run the way a person does: the HTML report and the MLflow UI in headless
Chromium (Debian's chromium + chromedriver, driven by Selenium; never a downloaded
browser). Screenshots are kept in test-artifacts/ for a human to look at."""
import json
import os
import sys
import time

import pytest

from conftest import REPO, free_port, server

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SHOTS = REPO / "test-artifacts"
# Without the network flags Chromium keeps calling Google's hosts, which are unreachable here.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--window-size=1400,1000")


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.skip(f"{missing} not installed: `apt-get install chromium chromium-driver` "
                    "(.ci/run does this where apt-get can run)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    SHOTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def wait_for_text(driver, texts: list[str], seconds: float = 60) -> str:
    """The page's visible text once it shows every one of `texts` (the UI renders late)."""
    deadline = time.monotonic() + seconds
    while True:
        body = driver.find_element("tag name", "body").text
        if all(t in body for t in texts) or time.monotonic() > deadline:
            return body
        time.sleep(0.5)


def test_report_html_shows_its_figures(reproduced, browser):
    repo, _ = reproduced
    browser.get((repo / "reports" / "report.html").as_uri())
    body = wait_for_text(browser, ["Training report"], 10)
    for heading in ("Test accuracy", "Most confident mistakes", "Calibration", "Params and lineage"):
        assert heading in body
    widths = browser.execute_script("return [...document.images].map(i => i.naturalWidth)")
    # token lengths, curves, confusion, reliability before and after the temperature, coverage-accuracy curve
    assert len(widths) == 6 and min(widths) > 100
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1200, height)
    browser.save_screenshot(str(SHOTS / "report.png"))


def test_the_readme_picture_is_drawn_from_the_report(reproduced, tmp_path):
    """scripts/report_picture.py (which `make repro` runs) draws the top of a real run's report."""
    import subprocess

    if not all(os.access(p, os.X_OK) for p in (CHROMIUM, CHROMEDRIVER)):
        pytest.skip(f"{CHROMIUM} and {CHROMEDRIVER} are needed (.ci/run installs them where apt-get can run)")
    repo, _ = reproduced
    out = tmp_path / "report.png"
    subprocess.run([sys.executable, str(REPO / "scripts" / "report_picture.py"), "--html",
                    str(repo / "reports" / "report.html"), "--out", str(out), "--width", "900"],
                   check=True, timeout=120)
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(head[16:20], "big") == 900
    assert "](docs/report.png)" in (REPO / "README.md").read_text() and (REPO / "docs" / "report.png").is_file()


@pytest.fixture
def mlflow_server(reproduced, tmp_path):
    repo, _ = reproduced
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1],
           "--backend-store-uri", f"sqlite:///{repo / 'mlflow.db'}"]
    # without MLflow's job runner: 8 more processes and ~2 GB the UI does not need (README, Team setup)
    with server(cmd, tmp_path, f"{url}/health", tmp_path / "server.log",  # not in the shared repo
                env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}):
        yield url, json.loads((repo / "reports/mlflow_run.json").read_text())


def test_mlflow_ui_lists_metrics_and_report(mlflow_server, browser):
    url, run = mlflow_server
    page = f"{url}/#/experiments/{run['experiment_id']}/runs/{run['run_id']}"
    browser.set_window_size(1400, 2400)  # tall enough to show the metrics table in the screenshot
    browser.get(page)
    body = wait_for_text(browser, ["test_accuracy", "gap_accuracy", "guard.load_audit"])
    for text in ("test_accuracy", "test_macro_f1", "test_ece", "gap_accuracy", "val_accuracy",
                 "train.lr_encoder", "guard.load_audit", "git_commit", "tokens"):
        assert text in body, text
    browser.save_screenshot(str(SHOTS / "mlflow_run.png"))
    browser.get(f"{page}/artifacts/report/report.html")
    # the UI lists the report folder after the root, a request later: wait for every name
    names = ["report.html", "confusion.png", "ingest_report.json", "metrics.json"]
    body = wait_for_text(browser, names)
    browser.save_screenshot(str(SHOTS / "mlflow_artifacts.png"))  # before asserting: see what it showed
    for text in names:
        assert text in body, text


def test_a_57_class_report_fits_the_page_and_folds_its_long_tables(browser, tmp_path):
    """Issue 50: at 57 classes the split table ran 57 columns off the page and every per-class
    table was 57 rows long. In Chromium at 1200 px: nothing is wider than the page, each long
    per-class table shows its worst rows and folds the rest (closed until clicked), the heatmap
    keeps the page width. The report's inputs are written as the stages write them."""
    from many_classes import RUN, write_inputs
    from textclf.report.document import to_html
    from textclf.report.run import build

    blocks, _ = build(write_inputs(tmp_path, 57), RUN, set())
    page = tmp_path / "report.html"
    page.write_text(to_html(blocks, "Training report"), encoding="utf-8")
    browser.set_window_size(1200, 1000)
    browser.get(page.as_uri())
    wait_for_text(browser, ["Training report"], 10)
    width = browser.execute_script("return window.innerWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
    right = browser.execute_script("return Math.max(...[...document.querySelectorAll('table, img')]"
                                   ".map(e => e.getBoundingClientRect().right))")
    assert right <= width
    folds = browser.find_elements("tag name", "details")
    assert len(folds) >= 4 and not any(f.get_attribute("open") for f in folds)
    folded = folds[0].find_element("tag name", "table")
    assert not folded.is_displayed()
    folds[0].find_element("tag name", "summary").click()
    assert folded.is_displayed()
    heatmap = browser.find_element("css selector", "img[alt^='confusion matrix']")
    assert heatmap.get_property("naturalWidth") > 800 and heatmap.size["width"] <= width
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1200, min(height, 16000))
    browser.save_screenshot(str(SHOTS / "report_57_classes.png"))
