"""A study whose report could not be produced ends with ReportUnavailable (after its runs are ended);
a one-seed study is no skip (it is tested per query). Real MLflow (SQLite), no Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.study._final_report import ReportUnavailable, report_study
from harness.study.protocol import TrialOutcome, TrialTicket
from harness.study.spec import load_study
from harness.tracking.conventions import TAG_REPORT_ERROR
from harness.tracking.records import StudyRecords
from harness.tracking.store import TrackingStore
from tests.study.conftest import write_study


def _recorded_study(tmp_path: Path, name: str, seeds: list[int], done: list[tuple[str, int]]):
    """Study ``name`` (the baseline and ls over ``seeds``) with its seed runs recorded as the driver
    records them, without training: those in ``done`` finished, the others failed."""
    spec = load_study(write_study(tmp_path, name, configs={"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.2}},
                                  seeds=seeds))
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    records = StudyRecords.open(store, name)
    study_run = records.study_started(study_text=spec.text, params={})
    for nc in spec.fixed_configs():
        for seed in spec.seeds:
            ticket = TrialTicket.of(nc.name, nc.role, nc.config, seed)
            if (nc.name, seed) in done:
                per_query = {"map": {f"q{i}": (i % 3) / 3 + seed / 10 + (nc.role == "candidate") / 20
                                     for i in range(6)}}
                test = {"map": sum(per_query["map"].values()) / 6}
                outcome = TrialOutcome(ticket.key, test["map"], test=test, evaluation="e1")
                records.trial_finished(ticket, outcome, per_query)
            else:
                records.trial_failed(ticket, "injected")
    return spec, store, records, study_run


def test_a_failed_trial_makes_the_report_unavailable_after_the_runs_end(tmp_path):
    done = [("baseline", 1), ("baseline", 2), ("ls", 1)]
    spec, store, records, study_run = _recorded_study(tmp_path, "broken", [1, 2], done)
    logs: list[str] = []
    with pytest.raises(ReportUnavailable) as exc:
        report_study(spec, records, logs.append)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("study 'broken': every trial is recorded, but the significance "
                                              "report could not be produced: ")
    assert "missing seeds" in msg
    run = store.client.get_run(study_run)
    assert run.info.status == "FINISHED" and "missing seeds" in run.data.tags[TAG_REPORT_ERROR]


def test_a_one_seed_study_gets_its_report(tmp_path):
    spec, store, records, study_run = _recorded_study(tmp_path, "single", [1], [("baseline", 1), ("ls", 1)])
    out = report_study(spec, records, lambda m: None)
    assert "map_p" in out["ls"]
    run = store.client.get_run(study_run)
    assert run.info.status == "FINISHED" and TAG_REPORT_ERROR not in run.data.tags
