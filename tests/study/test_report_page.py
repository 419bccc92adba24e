"""The study report on a real MLflow store (SQLite), no Ray: a study of three configurations and a
fourth stopped early, its seed runs recorded as the driver records them (dev curves, the tested
best-dev step, per-query test values; the stopped configuration's runs KILLED and tagged, the study
run's early-stopping metrics). The end of the study (report_study) logs report.html at the study
run's artifact root; `harness report` writes the same page; the curves read back are the ones
logged; a missing experiment, a dev metric no run has and an unwritable file are one-line errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.cli import main
from harness.driver._final_report import report_study
from harness.study.protocol import TrialOutcome, TrialTicket
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from harness.tracking.records import StudyRecords
from harness.tracking.store import TrackingStore
from tests.study.conftest import write_study
from tests.test_bad_input import unwritable

NAME = "paged"
STEPS = (3, 6, 9, 12)
SHIFT = {"baseline": 0.0, "ls": 0.08, "ls2": 0.0, "slow": -0.1}


def _dev(config: str, seed: int, step: int) -> float:
    """A dev curve that rises and, for some seeds, falls back after step 9."""
    return round(0.3 + SHIFT[config] + 0.02 * step - (0.1 if step == 12 and seed % 2 else 0.0) + seed / 1000, 6)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from mlflow.tracking._tracking_service import utils as mlflow_tracking

    tmp = tmp_path_factory.mktemp("report-page")
    spec = load_spec(write_study(tmp, NAME, seeds=[1, 2, 3], configs={
        "ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.2},
        "ls2": {"smoothing.method": "LS", "smoothing.epsilon": 0.1},
        "slow": {"smoothing.method": "LS", "smoothing.epsilon": 0.3}}))
    uri = f"sqlite:///{tmp / 'mlruns' / 'mlflow.db'}"
    logs: list[str] = []
    g = np.random.default_rng(3)
    qids = [f"q{i}" for i in range(12)]
    difficulty = g.uniform(0.2, 0.7, len(qids))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setattr(mlflow_tracking, "_tracking_uri", mlflow_tracking._tracking_uri)
        store = TrackingStore(uri)
        records = StudyRecords.open(store, NAME)
        study_run = records.study_started(study_text=spec.text, params={})
        for nc in spec.fixed_configs():
            for seed in spec.seeds:
                ticket = TrialTicket.of(nc.name, nc.role, nc.config, seed)
                steps = STEPS[:2] if nc.name == "slow" else STEPS
                for step in steps:
                    records.dev_point(ticket, step, {"map": _dev(nc.name, seed, step),
                                                     "mrr": _dev(nc.name, seed, step) + 0.1})
                if nc.name == "slow":  # early stopping at step 6: tagged, KILLED (harness.driver._early_stop_ray)
                    tags = {C.TAG_STOPPED: "1", C.TAG_STOPPED_RUNG: "6", C.TAG_STOPPED_REASON: "below the baseline"}
                    run = records.trial_started(ticket)
                    store.set_tags(run, tags)
                    store.set_tags(records.config_runs()[nc.config.config_id()], tags)
                    store.end_run(run, "KILLED")
                    continue
                best = max(steps, key=lambda s: _dev(nc.name, seed, s))
                per_query = {m: dict(zip(qids, np.clip(difficulty + SHIFT[nc.name] + k / 10
                                                       + g.normal(0, 0.05, len(qids)), 0, 1).round(6).tolist(),
                                         strict=True)) for k, m in enumerate(("map", "mrr"))}
                test = {m: float(np.mean(list(v.values()))) for m, v in per_query.items()}
                outcome = TrialOutcome(ticket.key, _dev(nc.name, seed, best), best_step=best, test=test,
                                       evaluation="e1")
                records.trial_finished(ticket, outcome, per_query)
        store.log_metrics(study_run, {C.METRIC_STEPS_SAVED: 6.0, C.METRIC_STEPS_RUN: 42.0, C.METRIC_STOPPED: 1.0})
        # The pick a confirmation phase records (by config id; its retraining is not recorded here).
        records.study_tags({C.TAG_CONFIRM_PICK: next(nc.config.config_id() for nc in spec.configs
                                                     if nc.name == "ls")})
        report_study(spec, records, logs.append)
        records.end()  # the study finished, as its driver ends it after the page (else: INCOMPLETE)
        page = Path(store.client.download_artifacts(study_run, "report.html", str(tmp)))
    return {"uri": uri, "spec": spec, "store": store, "study_run": study_run, "page": page.read_text(),
            "logs": logs, "tmp": tmp}


def _section(page: str, key: str) -> str:
    return re.search(rf'<section id="{key}">(.*?)</section>', page, re.DOTALL).group(1)


@pytest.mark.slow
def test_the_study_run_gets_the_page(study):
    page = study["page"]
    assert not any(line.startswith("report.html: skipped") for line in study["logs"])
    decided = _section(page, "decisions")
    assert "Early stopping stopped slow at step 6: below the baseline; 6 of 48 trial-steps saved (12%)" in decided
    assert "Confirmation: the dev objective picked ls for retraining" in decided  # its name, not its id
    significance = _section(page, "significance")
    for name in ("baseline", "ls", "ls2"):
        assert f"<th>{name}</th>" in significance
    assert "slow" not in significance.split("<tfoot>")[0]  # a stopped configuration is out of the table
    assert page.count("data:image/png;base64,") == 3


@pytest.mark.slow
def test_the_curves_read_back_are_the_ones_logged(study):
    """read_study_record: every seed's dev_map history, the tested step, the stopped step."""
    from harness.results.mlflow_reader import read_experiment
    from harness.results.study_record import read_study_record

    results = read_experiment(NAME, tracking_uri=study["uri"])
    record = read_study_record(NAME, results, tracking_uri=study["uri"])
    assert record.metric == "map"  # the study's objective (study.yaml's default)
    assert set(record.curves) == {"baseline", "ls", "ls2", "slow"} and record.stopped_at == {"slow": 6}
    for config, seeds in record.curves.items():
        steps = STEPS[:2] if config == "slow" else STEPS
        assert seeds == {str(s): tuple((t, _dev(config, s, t)) for t in steps) for s in (1, 2, 3)}
    assert record.tested["ls"] == {"1": 9, "2": 12, "3": 9}  # odd seeds fall back after step 9
    assert "slow" not in record.tested
    assert record.confirmation_pick == ("ls",)
    assert record.early_stopping == {C.METRIC_STEPS_SAVED: 6.0, C.METRIC_STEPS_RUN: 42.0, C.METRIC_STOPPED: 1.0}
    mrr = read_study_record(NAME, results, tracking_uri=study["uri"], metric="mrr")
    assert mrr.curves["ls"]["2"][0] == (3, _dev("ls", 2, 3) + 0.1)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.slow
def test_harness_report_writes_the_same_page(study, capsys):
    """The file `harness report` writes and the study run's page: the same sections, figures included
    (matplotlib's Agg draws the same bytes), up to the footer's time."""
    to = study["tmp"] / "out" / "report.html"
    rc, out, err = _cli(capsys, "report", "--experiment", NAME, "--to", str(to), "--tracking-uri", study["uri"])
    assert (rc, out, err) == (0, "", f"wrote {to}\n"), err
    written = to.read_text()
    for key in ("decisions", "significance", "forest", "curves", "power"):
        assert _section(written, key) == _section(study["page"], key), key


@pytest.mark.slow
def test_harness_report_errors_are_one_line(study, capsys, tmp_path):
    uri = study["uri"]
    rc, _, err = _cli(capsys, "report", "--experiment", "nope", "--to", str(tmp_path / "r.html"), "--tracking-uri", uri)
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("harness: error: unknown MLflow experiment 'nope' at ") and f"{NAME}" in err
    rc, _, err = _cli(capsys, "report", "--experiment", NAME, "--to", str(tmp_path / "r.html"),
                      "--tracking-uri", uri, "--metric", "nDCG@10")
    assert rc == 2 and err == ("harness: error: no seed run of the study has a dev curve of 'ndcg_10' "
                               "(dev_ndcg_10); dev curves there: map, mrr\n")
    target = unwritable(tmp_path) / "r.html"
    rc, _, err = _cli(capsys, "report", "--experiment", NAME, "--to", str(target), "--tracking-uri", uri)
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"harness: error: {target}: cannot write the report: ")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_the_python_api_block_builds_the_same_page(study, monkeypatch):
    """docs/python-api.md's block (on this study, from the directory of its ./mlruns store) gives
    the study run's page (and so `harness report`'s)."""
    import runpy

    docs = (Path(__file__).parents[2] / "docs" / "python-api.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(from harness.present import report_html.*?)```", docs, re.DOTALL).group(1)
    script = study["tmp"] / "api_block.py"
    script.write_text(block.replace('"quickstart"', repr(NAME)), encoding="utf-8")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(study["tmp"])  # ./mlruns/mlflow.db is the store
    page = runpy.run_path(str(script))["page"]
    for key in ("decisions", "significance", "forest", "curves", "power"):
        assert _section(page, key) == _section(study["page"], key), key
