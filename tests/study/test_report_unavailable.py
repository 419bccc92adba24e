"""A study with failed trials ends with TrialsFailed naming them, one whose report could not be
produced with ReportUnavailable (after its runs are ended, the study run FAILED); a one-seed study is
no skip (it is tested per query). Real MLflow (SQLite), no Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.driver._final_report import ReportUnavailable, TrialsFailed, report_study
from harness.study.protocol import TrialOutcome, TrialTicket
from harness.study.spec import load_spec
from harness.tracking.conventions import TAG_REPORT_ERROR
from harness.tracking.records import StudyRecords
from harness.tracking.store import TrackingStore
from tests.study.conftest import write_study


def _recorded_study(tmp_path: Path, name: str, seeds: list[int], done: list[tuple[str, int]],
                    other_evaluation: tuple[str, int] | None = None):
    """Study ``name`` (the baseline and ls over ``seeds``) with its seed runs recorded as the driver
    records them, without training: those in ``done`` finished (``other_evaluation`` on other
    evaluation candidates), the others failed."""
    spec = load_spec(write_study(tmp_path, name, configs={"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.2}},
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
                evaluation = "e2" if (nc.name, seed) == other_evaluation else "e1"
                outcome = TrialOutcome(ticket.key, test["map"], test=test, evaluation=evaluation)
                records.trial_finished(ticket, outcome, per_query)
            else:
                records.trial_failed(ticket, "injected")
    return spec, store, records, study_run


def test_failed_trials_are_named_and_the_study_run_ends_failed(tmp_path):
    """A trial that failed after its retries: no report over the seeds that happened to finish; the
    error names it, the study run and its configuration's run end FAILED, the others FINISHED."""
    done = [("baseline", 1), ("baseline", 2), ("ls", 1)]
    spec, store, records, study_run = _recorded_study(tmp_path, "broken", [1, 2], done)
    logs: list[str] = []
    with pytest.raises(TrialsFailed) as exc:
        report_study(spec, records, logs.append)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("study 'broken': 1 trial(s) failed after their retries: ls-seed2 (injected); ")
    assert msg.endswith("`harness run STUDY --resume` runs the failed trials again")
    run = store.client.get_run(study_run)
    assert run.info.status == "FAILED" and "ls-seed2 (injected)" in run.data.tags[TAG_REPORT_ERROR]
    status = {r.info.run_name: r.info.status for r in store.client.search_runs([records.experiment_id])}
    assert status == {"broken": "FAILED", "baseline": "FINISHED", "ls": "FAILED", "baseline-seed1": "FINISHED",
                      "baseline-seed2": "FINISHED", "ls-seed1": "FINISHED", "ls-seed2": "FAILED"}
    assert not any("finished;" in m for m in logs)


def test_a_report_that_cannot_be_made_ends_the_study_run_failed(tmp_path):
    """Every trial finished, but one seed was evaluated on other candidates: nothing is paired,
    the report is unavailable, and the study run says so (FAILED)."""
    done = [("baseline", 1), ("baseline", 2), ("ls", 1), ("ls", 2)]
    spec, store, records, study_run = _recorded_study(tmp_path, "mixed", [1, 2], done, other_evaluation=("ls", 2))
    with pytest.raises(ReportUnavailable) as exc:
        report_study(spec, records, lambda m: None)
    assert not isinstance(exc.value, TrialsFailed)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("study 'mixed': every trial is recorded, but the significance "
                                              "report could not be produced: ")
    run = store.client.get_run(study_run)
    assert run.info.status == "FAILED" and TAG_REPORT_ERROR in run.data.tags


def test_a_one_seed_study_gets_its_report(tmp_path):
    spec, store, records, study_run = _recorded_study(tmp_path, "single", [1], [("baseline", 1), ("ls", 1)])
    out = report_study(spec, records, lambda m: None)
    # One seed cannot estimate training variance: the report is made, untested (docs/statistics.md)
    assert "map_mean" in out["ls"] and "map_p" not in out["ls"]
    run = store.client.get_run(study_run)
    assert run.info.status == "FINISHED" and TAG_REPORT_ERROR not in run.data.tags


def test_a_seed_run_two_old_drivers_both_recorded_is_named_then_repaired(tmp_path):
    """Two drivers of an older version (no lease on the experiment) both recorded ls seed 2: the
    table refuses in one line naming both runs and the repair; a driver's records then delete the
    later one (tagged with the run it repeats) and the table reads."""
    from harness.errors import DataError
    from harness.results.mlflow_reader import read_experiment
    from harness.tracking import conventions as C

    done = [("baseline", 1), ("baseline", 2), ("ls", 1), ("ls", 2)]
    spec, store, records, _ = _recorded_study(tmp_path, "twice", [1, 2], done)
    ls = next(nc for nc in spec.configs if nc.name == "ls")
    ticket = TrialTicket.of(ls.name, ls.role, ls.config, 2)
    first = records.done_run(ticket.key)
    other = StudyRecords(store, records.experiment_id, "twice")  # the second driver, as it loaded
    other._done.clear()
    other._seeds.clear()
    per_query = {"map": {f"q{i}": 0.5 for i in range(6)}}
    other.trial_finished(ticket, TrialOutcome(ticket.key, 0.5, test={"map": 0.5}, evaluation="e1"), per_query)
    second = other.done_run(ticket.key)
    assert first is not None and second is not None and first.run_id != second.run_id
    with pytest.raises(DataError) as exc:
        read_experiment("twice", tracking_uri=store.uri)
    msg = str(exc.value)
    assert "\n" not in msg and f"{first.run_id} and {second.run_id}" in msg
    assert msg.endswith("`harness run STUDY --resume` keeps the first and deletes the other")
    reopened = StudyRecords.open(store, "twice")
    removed = reopened.remove_duplicates()
    assert [(k.run_id, d.run_id) for k, d in removed] == [(first.run_id, second.run_id)]
    gone = store.client.get_run(second.run_id)
    assert gone.info.lifecycle_stage == "deleted" and gone.data.tags[C.TAG_DUPLICATE_OF] == first.run_id
    results = read_experiment("twice", tracking_uri=store.uri)
    assert sorted(results.configs) == ["baseline", "ls"]
    assert StudyRecords.open(store, "twice").duplicates == []


def test_a_data_load_that_fails_ends_the_study_run_failed(tmp_path):
    """The data of a study goes away between `validate` and `run` (a TREC directory removed): the
    driver stops with one error before Ray starts, and the study run it had opened ends FAILED
    instead of staying RUNNING."""
    import shutil

    from harness.driver.runner import run_study
    from harness.errors import HarnessError
    from tests.test_bad_input_sweep import _trec

    data = _trec(tmp_path)
    # the template's data section is the embedded set's (data.conversations, which trec does not read)
    spec = load_spec(write_study(tmp_path, "gone", data={"source": "trec", "path": str(data), "conversations": None},
                                  seeds=[1, 2]))
    shutil.rmtree(data)
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    logs: list[str] = []
    with pytest.raises(HarnessError, match="no such|missing|not found|does not exist"):
        run_study(spec, tracking_uri=uri, progress=logs.append)
    store = TrackingStore(uri)
    runs = store.client.search_runs([store.client.get_experiment_by_name("gone").experiment_id])
    assert runs and {r.info.status for r in runs} == {"FAILED"}
    assert any("left running ended FAILED" in line for line in logs)
