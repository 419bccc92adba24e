"""The MLflow UI of a finished study, as a person sees it in a browser: `harness ui` on the store the
smoke job wrote, opened in headless Chromium (Debian's /usr/bin/chromium driven by Playwright; no
browser download). The config runs appear nested under the study run with their p-values, and two of
them open in the compare view. Screenshots land in the test's tmp dir (HARNESS_UI_SHOTS=DIR keeps them)."""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.tracking import conventions

from .conftest import SmokeJob, explain
from .services import MlflowServer, start_harness_ui

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
COLUMNS = ("map_p", "map_delta", "harness.marker.map")
HIDDEN = ("Dataset", "Source", "Models")  # default columns, hidden so the metric columns fit on screen


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser test needs Playwright: pip install playwright (no browser download: it "
                    "drives Debian's chromium)")
    if not CHROMIUM.exists():
        pytest.skip(f"browser test needs {CHROMIUM}: apt-get install -y chromium (`make test` installs "
                    "it when run as root)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def ui_url(smoke_job: SmokeJob, mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert smoke_job.result.returncode == 0, explain(smoke_job.result)
    service, url = start_harness_ui(tmp_path_factory.mktemp("ui"), mlflow_server.backend_uri)
    yield url
    service.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("screenshots")
    yield out
    keep = os.environ.get("HARNESS_UI_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for png in out.glob("*.png"):
            shutil.copy(png, Path(keep) / png.name)


@pytest.fixture(scope="module")
def runs_page(browser: Any, ui_url: str, smoke_job: SmokeJob) -> Iterator[Any]:
    """One page on the experiment's runs table, the study run expanded, p-value columns shown."""
    study = next(r for r in smoke_job.runs if _tags(r).get("harness.kind") == "study")
    configs = [r["info"]["run_name"] for r in smoke_job.runs if _tags(r).get("harness.kind") == "config"]
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    open_runs_table(page, ui_url, smoke_job.experiment_id, study["info"]["run_name"], configs)
    yield page
    page.close()


def _tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _metric(run: dict[str, Any], key: str) -> float:
    return next(m["value"] for m in run["data"]["metrics"] if m["key"] == key)


def _row_index(page: Any, run_name: str) -> str:
    row = page.locator("[role=row]", has=page.get_by_text(run_name, exact=True)).first
    return str(row.get_attribute("row-index"))


def _cell(page: Any, run_name: str, col_id: str) -> str:
    idx = _row_index(page, run_name)
    return str(page.locator(f"[role=row][row-index='{idx}'] [role=gridcell][col-id='{col_id}']").first.inner_text())


def open_runs_table(page: Any, url: str, experiment_id: str, study: str, configs: list[str]) -> None:
    """The experiment's runs table, the study run expanded, p-value columns shown: its own address
    (``conventions.runs_page(verdicts=False)``; the bare one opens on the verdict view, config runs alone, which
    tests/tracking/test_ui_landing.py checks)."""
    page.goto(f"{url}{conventions.runs_page(experiment_id, verdicts=False)}", wait_until="load")
    page.get_by_text(study, exact=True).last.wait_for(timeout=60_000)
    assistant = page.locator("button[aria-label='Close']")
    if assistant.count():
        assistant.first.click()  # MLflow 3's assistant side panel takes a third of the width
    for name in configs:
        assert not page.get_by_text(name, exact=True).is_visible(), f"{name} shown before expanding the study run"
    idx = _row_index(page, study)
    page.locator(f"[role=row][row-index='{idx}'] [col-id='attributes.`Run Name`'] button").first.click()
    for name in configs:
        page.get_by_text(name, exact=True).wait_for(timeout=10_000)
    page.get_by_role("button", name="Columns", exact=True).click()
    search = page.get_by_placeholder("Search columns")
    for name in (*COLUMNS, *HIDDEN):
        search.fill(name)
        page.get_by_text(name, exact=True).last.click()
    page.keyboard.press("Escape")
    page.locator("[col-id='metrics.`map_p`']").first.wait_for(timeout=10_000)


@pytest.mark.heavy
def test_config_runs_nested_under_the_study_run_with_p_values(runs_page: Any, smoke_job: SmokeJob,
                                                               shots: Path) -> None:
    page = runs_page
    study = next(r for r in smoke_job.runs if _tags(r).get("harness.kind") == "study")
    configs = [r for r in smoke_job.runs if _tags(r).get("harness.kind") == "config"]
    names = [r["info"]["run_name"] for r in configs]
    page.screenshot(path=str(shots / "runs-table.png"))

    # Nested: the config rows come right after the study row, which they appeared under.
    first = int(_row_index(page, study["info"]["run_name"])) + 1
    assert sorted(int(_row_index(page, n)) for n in names) == list(range(first, first + len(names)))
    for run in configs:
        name = run["info"]["run_name"]
        if _tags(run)["harness.role"] == "baseline":
            assert _cell(page, name, "metrics.`map_p`").strip() == "-"
            continue
        shown = _cell(page, name, "metrics.`map_p`")
        assert math.isclose(float(shown), _metric(run, "map_p"), rel_tol=1e-9), (name, shown)
        assert math.isclose(float(_cell(page, name, "metrics.`map_delta`")), _metric(run, "map_delta"),
                            rel_tol=1e-9, abs_tol=1e-12)
        assert _cell(page, name, "tags.`harness.marker.map`") == _tags(run)["harness.marker.map"]


@pytest.mark.heavy
def test_compare_view_of_two_config_runs(runs_page: Any, smoke_job: SmokeJob, shots: Path) -> None:
    page = runs_page
    configs = [r for r in smoke_job.runs if _tags(r).get("harness.kind") == "config"]
    pair = [r for r in configs if _tags(r)["harness.role"] == "candidate"][:2]
    for run in pair:
        idx = _row_index(page, run["info"]["run_name"])
        page.locator(f"[role=row][row-index='{idx}'] input.ag-checkbox-input").first.check()
    page.get_by_role("button", name=re.compile(r"^Compare")).first.click()
    page.wait_for_url(re.compile(r"compare-runs"), timeout=30_000)
    page.get_by_text("Comparing 2 Runs").wait_for(timeout=30_000)
    for run in pair:
        assert run["info"]["run_id"] in page.url
        page.get_by_text(run["info"]["run_name"], exact=True).first.wait_for(timeout=10_000)
    page.screenshot(path=str(shots / "compare.png"))
    # The metrics table lists the p-value row; scroll it into view for the second screenshot.
    p_row = page.get_by_text("map_p", exact=True).first
    p_row.scroll_into_view_if_needed()
    assert p_row.is_visible()
    text = page.inner_text("body")
    for run in pair:  # the UI rounds metrics to 3 decimals
        assert f"{round(_metric(run, 'map_p'), 3):g}" in text
    page.screenshot(path=str(shots / "compare-metrics.png"))
