"""`harness ui` opens on the study's training runs with their verdicts, not on MLflow 3's GenAI
overview: the address it prints to open, loaded in headless Chromium (Debian's /usr/bin/chromium
driven by Playwright), shows the config runs, each with its verdict in the Description column, on
the model-training side of the UI; so do the bare root, the experiment's bare address and a run's
page in a browser that never chose a side (MLflow would open them on its GenAI side: the sidebar of
Overview, Judges, Traces). docs/storage.md."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.tracking import conventions as C
from tests.tracking.conftest import write_benchmark_study

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
GENAI_SIDEBAR = ("Judges", "Observability")  # entries of the GenAI side's sidebar only


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, str]]:
    """A finished study as the driver records it (three configurations, their verdicts as run
    descriptions, the verdict view): (tracking URI, experiment id, config run name -> verdict)."""
    from mlflow.tracking import MlflowClient

    from harness.tracking.records import StudyRecords
    from harness.tracking.store import TrackingStore

    db = tmp_path_factory.mktemp("mlruns") / "mlflow.db"
    uri = f"sqlite:///{db}"
    written = write_benchmark_study(uri, queries=12)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(written)
    assert exp.tags[C.TAG_EXPERIMENT_KIND] == C.EXPERIMENT_KIND  # set as the driver created it
    StudyRecords(TrackingStore(uri), exp.experiment_id, written).verdict_view("map")
    verdicts = {}
    for run in client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_CONFIG}'"):
        verdicts[run.info.run_name] = f"verdict of {run.info.run_name}: MAP +0.0{len(verdicts)}"
        client.set_tag(run.info.run_id, C.TAG_NOTE, verdicts[run.info.run_name])
    return uri, exp.experiment_id, verdicts


@pytest.fixture(scope="module")
def ui(study, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """`harness ui` on the study's store: (its root address, the address it says to open)."""
    from tests.cluster.services import REPO, clean_env, free_port, spawn

    uri = study[0]
    log = tmp_path_factory.mktemp("ui") / "harness-ui.log"
    port = free_port()
    service = spawn("harness ui", [sys.executable, "-m", "harness.cli", "ui", "--tracking-uri", uri,
                                   "--port", str(port)], log, clean_env(), REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        service.wait_http(f"{url}/health", 300)  # a loaded machine starts MLflow's server slowly
        first = log.read_text().splitlines()[0]
        yield url, first.rsplit(": open ", 1)[1].strip()
    finally:
        service.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser test needs Playwright: pip install playwright (it drives Debian's chromium)")
    if not CHROMIUM.exists():
        pytest.skip(f"browser test needs {CHROMIUM}: apt-get install -y chromium")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                               args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def test_the_address_to_open_is_the_studys_verdict_view(study, ui) -> None:
    url, landing = ui
    assert landing == url + C.runs_page(study[1])


def test_the_first_screen_shows_the_runs_with_their_verdicts_not_the_genai_overview(study, ui, browser,
                                                                                    tmp_path: Path) -> None:
    _, exp_id, verdicts = study
    _, landing = ui
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    try:
        page.goto(landing, wait_until="load")
        for name in verdicts:
            page.get_by_text(name, exact=True).first.wait_for(timeout=240_000)
        page.get_by_text(next(iter(verdicts.values())), exact=True).first.wait_for(timeout=30_000)
        page.screenshot(path=str(tmp_path / "landing.png"))
        body = page.inner_text("body")
        assert f"/experiments/{exp_id}/runs" in page.url and "Description" in body, body[:2000]
        assert all(text in body for text in verdicts.values()), body[:2000]
        assert not [w for w in GENAI_SIDEBAR if w in body], body[:2000]
        assert "Detect Issues" not in body and "-seed" not in body  # no GenAI pop-up; seed runs stay behind

    finally:
        page.close()


def test_every_address_of_the_study_opens_on_training_runs_in_a_fresh_browser(study, ui, browser) -> None:
    """MLflow 3.17 opens the GenAI side unless the address or the browser's remembered choice says
    otherwise (harness.tracking.ui): the bare root, the experiment's bare address and a run's page,
    each in a browser that never chose, open on the training side; the root and the experiment on
    the verdict view. A browser that chose GenAI with the UI's switch keeps its choice."""
    from mlflow.tracking import MlflowClient

    uri, exp_id, verdicts = study
    url, _ = ui
    run = MlflowClient(uri).search_runs([exp_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_CONFIG}'")[0]
    for address, shown in ((f"{url}/", verdicts.values()), (f"{url}/#/experiments/{exp_id}", verdicts.values()),
                           (f"{url}/#/experiments/{exp_id}/runs/{run.info.run_id}", [run.info.run_name])):
        page = browser.new_page(viewport={"width": 1600, "height": 1000})  # a fresh context each
        try:
            page.goto(address, wait_until="load")
            for text in shown:
                page.get_by_text(text, exact=True).first.wait_for(timeout=240_000)
            body = page.inner_text("body")
            assert not [w for w in GENAI_SIDEBAR if w in body], (address, body[:2000])
            assert "Detect Issues" not in body, address
            if shown is not verdicts.values():
                continue
            assert f"/experiments/{exp_id}/runs" in page.url and C.VERDICT_VIEW in page.url, page.url
        finally:
            page.close()

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    try:  # the UI's switch set to GenAI in this browser: kept
        # remembered before any page of the UI runs (set from a loaded page, the page's own redirect
        # to the verdict view could land after it and MLflow would remember training instead)
        page.add_init_script("localStorage.setItem('mlflow.workflowType_v1', JSON.stringify('genai'))")
        page.goto(f"{url}/#/experiments/{exp_id}", wait_until="load")
        page.reload(wait_until="load")
        page.get_by_text("Judges", exact=True).first.wait_for(timeout=120_000)
    finally:
        page.close()
