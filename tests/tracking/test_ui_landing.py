"""`harness ui` on the session's finished study (tests/conftest.py's ``finished_study``, real Ray
and MLflow) opens on the study's training runs with their verdicts, not on MLflow 3's GenAI
overview: the address it prints to open, loaded in headless Chromium (Debian's /usr/bin/chromium
driven by Playwright), shows the config runs, each with its verdict in the Description column, on
the model-training side of the UI; so do the bare root, the experiment's bare address and a run's
page in a browser that never chose a side (MLflow would open them on its GenAI side: the sidebar of
Overview, Judges, Traces). At the end, `kill` (SIGTERM) to `harness ui` leaves no server behind
(tests/study/test_ui_stop.py holds SIGHUP and SIGKILL). One MLflow server and one browser for the
module. docs/storage.md."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.tracking import conventions as C

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
GENAI_SIDEBAR = ("Judges", "Observability")  # entries of the GenAI side's sidebar only


@pytest.fixture(scope="module")
def study(finished_study) -> tuple[str, str, str, dict[str, str]]:
    """The finished study as its driver recorded it: (tracking URI, experiment id, study name,
    config run name -> its verdict, the run's description)."""
    exp = finished_study.client.get_experiment_by_name(finished_study.name)
    assert exp.tags[C.TAG_EXPERIMENT_KIND] == C.EXPERIMENT_KIND  # set as the driver created it
    verdicts = {r.info.run_name: r.data.tags[C.TAG_NOTE] for r in finished_study.runs(C.KIND_CONFIG)}
    return finished_study.uri, exp.experiment_id, finished_study.name, verdicts


@pytest.fixture(scope="module")
def ui(study, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, object]]:
    """`harness ui` on the study's store: (its root address, the address it says to open first,
    what it printed, its process as ``tests.cluster.services.Service``)."""
    from tests.cluster.services import REPO, clean_env, free_port, spawn

    log = tmp_path_factory.mktemp("ui") / "harness-ui.log"
    port = free_port()
    service = spawn("harness ui", [sys.executable, "-m", "harness.cli", "ui", "--tracking-uri", study[0],
                                   "--port", str(port)], log, clean_env(), REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        service.wait_http(f"{url}/health", 300)  # a loaded machine starts MLflow's server slowly
        printed = log.read_text()
        yield url, printed.splitlines()[0].rsplit(": open ", 1)[1].strip(), printed, service
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
    _, exp_id, name, _ = study
    url, landing, printed, service = ui
    assert landing == url + C.runs_page(exp_id)
    # ... served without MLflow's job runner (its worker processes poll without pause)
    import psutil

    server = [" ".join(p.cmdline()) for p in psutil.Process(service.proc.pid).children(recursive=True)]
    assert server and not [c for c in server if "mlflow.server.jobs" in c], server
    # ... and the study's own line names the same page
    shown = next(line.split(" at ", 1)[1].strip() for line in printed.splitlines()
                 if line.strip().startswith(f"study {name}:"))
    assert shown == landing


def test_the_first_screen_shows_each_configurations_verdict_not_the_genai_overview(study, ui, browser,
                                                                                  tmp_path: Path) -> None:
    """The runs table lists the config runs (not their seed runs) and shows each one's verdict in
    the Description column, with no column added by hand; the page is the model-training side."""
    _, exp_id, _, verdicts = study
    _, landing, _, _ = ui
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    try:
        page.goto(landing, wait_until="load")
        for name in verdicts:
            page.get_by_text(name, exact=True).first.wait_for(timeout=240_000)
        page.screenshot(path=str(tmp_path / "verdicts.png"))
        for name, text in verdicts.items():
            row = page.locator("[role=row]", has=page.get_by_text(name, exact=True)).first
            idx = row.get_attribute("row-index")
            cells = " ".join(page.locator(f"[role=row][row-index='{idx}']").all_inner_texts())
            # The runs table shows a description's first 50 characters (then "..."; the whole line
            # on hover and on the run's page): the decision, difference, interval and p.
            assert (text if len(text) <= 50 else f"{text[:50]}...") in cells, (name, text, cells)
        body = page.inner_text("body")
        assert f"/experiments/{exp_id}/runs" in page.url and "Description" in body, body[:2000]
        assert not [w for w in GENAI_SIDEBAR if w in body], body[:2000]
        assert "Detect Issues" not in body  # no GenAI pop-up
        assert not [n for n in verdicts if f"{n}-seed" in body]  # the seed runs stay behind them
    finally:
        page.close()


def test_every_address_of_the_study_opens_on_training_runs_in_a_fresh_browser(study, ui, browser) -> None:
    """MLflow 3.17 opens the GenAI side unless the address or the browser's remembered choice says
    otherwise (harness.tracking.ui): the bare root, the experiment's bare address and a run's page,
    each in a browser that never chose, open on the training side; the root and the experiment on
    the verdict view. A browser that chose GenAI with the UI's switch keeps its choice."""
    from mlflow.tracking import MlflowClient

    uri, exp_id, _, verdicts = study
    url, _, _, _ = ui
    run = MlflowClient(uri).search_runs([exp_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_CONFIG}'")[0]
    for address, shown in ((f"{url}/", list(verdicts)), (f"{url}/#/experiments/{exp_id}", list(verdicts)),
                           (f"{url}/#/experiments/{exp_id}/runs/{run.info.run_id}", [run.info.run_name])):
        page = browser.new_page(viewport={"width": 1600, "height": 1000})  # a fresh context each
        try:
            page.goto(address, wait_until="load")
            for text in shown:
                page.get_by_text(text, exact=True).first.wait_for(timeout=240_000)
            body = page.inner_text("body")
            assert not [w for w in GENAI_SIDEBAR if w in body], (address, body[:2000])
            assert "Detect Issues" not in body, address
            if len(shown) == 1:
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


def test_ctrl_c_on_harness_ui_stops_its_mlflow_server_and_the_terminal_kept_its_lines(ui) -> None:
    """Last in the module: Ctrl-C (SIGINT) on `harness ui` after it served the pages above ends it
    (exit 0) and its MLflow server's processes. Without -v the terminal held only the harness's own
    lines, from start to stop: the addresses, not MLflow's start-up notes, uvicorn's INFO lines,
    the web stack's deprecation warnings or a shutdown traceback."""
    from tests.cluster.services import signal_stops_ui

    url, _, printed, service = ui
    signal_stops_ui(service.proc, int(url.rsplit(":", 1)[1]), signal.SIGINT)
    lines = service.log.read_text().splitlines()
    assert lines[0].startswith("MLflow UI for ") and len(lines) == len(printed.splitlines()), lines
    assert all(line.startswith(("MLflow UI for ", "  study ")) for line in lines), lines
