"""One read of a study's runs (harness.tracking.snapshot): the SQLite store read directly gives what
MLflow's client gives (runs, tags, latest metrics with NaN, metric histories; deleted runs left
out; newest first), so `harness table` on the default store reads it without importing MLflow, and
a table read either way is the same table."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import DataError
from harness.results.mlflow_reader import _read, incomplete_note, one_read, open_experiment, read_experiment
from harness.results.study_record import _read as read_record
from harness.tracking import conventions as C
from harness.tracking.snapshot import ExperimentSnapshot, SqliteSnapshot, sqlite_experiment
from tests.tracking.conftest import write_benchmark_study

mlflow = pytest.importorskip("mlflow")

STUDY = "snap-study"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A study as the driver writes it (harness.tracking.records, real MLflow), plus a deleted seed
    run, a NaN metric and a second experiment."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlruns") / "mlflow.db"
    uri = f"sqlite:///{db.resolve()}"
    written = write_benchmark_study(uri, queries=12, seeds=3)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(written)
    client.rename_experiment(exp.experiment_id, STUDY)
    trial = client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}' and "
                               "attributes.status = 'FINISHED'")[0]
    for step, value in ((10, 0.25), (20, 0.5), (20, 0.75)):
        client.log_metric(trial.info.run_id, "dev_map", value, step=step)
    client.log_metric(trial.info.run_id, "odd", math.nan)
    gone = client.create_run(exp.experiment_id, tags={C.TAG_KIND: C.KIND_TRIAL, C.TAG_SEED: "7"})
    client.delete_run(gone.info.run_id)
    client.create_experiment("other")
    return uri, db


def _both(uri: str, db: Path) -> tuple[ExperimentSnapshot, ExperimentSnapshot]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name(STUDY).experiment_id
    found = sqlite_experiment(db, STUDY)
    assert found == (exp_id, ["Default", "other", STUDY])
    return ExperimentSnapshot(exp_id, lambda: client), SqliteSnapshot(db, exp_id, lambda: client)


def _view(run) -> tuple:
    metrics = {k: ("nan" if math.isnan(v) else v) for k, v in run.data.metrics.items()}
    return (run.info.run_id, run.info.run_name, run.info.status, run.info.start_time, run.info.artifact_uri,
            dict(run.data.tags), metrics)


@pytest.mark.parametrize("kind", [C.KIND_STUDY, C.KIND_CONFIG, C.KIND_TRIAL])
def test_the_sqlite_read_gives_what_mlflows_client_gives(store, kind: str) -> None:
    mlflow_side, direct = _both(*store)
    want = [_view(r) for r in mlflow_side.runs(kind)]
    assert want and [_view(r) for r in direct.runs(kind)] == want
    if kind == C.KIND_TRIAL:
        assert any(v[-1].get("odd") == "nan" for v in want)  # a NaN metric, read as NaN
        assert not any(v[5].get(C.TAG_SEED) == "7" for v in want)  # the deleted run is left out
        run_id = next(v[0] for v in want if "dev_map" in v[-1])
        assert sorted(direct.metric_history(run_id, "dev_map")) == sorted(
            mlflow_side.metric_history(run_id, "dev_map"))
        assert len(direct.metric_history(run_id, "dev_map")) == 3


def test_a_table_read_either_way_is_the_same(store) -> None:
    uri, db = store
    mlflow_side, direct = _both(uri, db)
    a = _read(mlflow_side, STUDY, uri, None, None)
    b = _read(direct, STUDY, uri, None, None)
    assert a == b
    assert read_experiment(STUDY, tracking_uri=uri) == b
    record = read_record(direct, b, "map")
    assert record == read_record(mlflow_side, b, "map") and record.curves  # the dev curve logged above


def test_one_read_shares_one_snapshot_per_experiment(store) -> None:
    uri, _ = store
    with one_read():
        first, _ = open_experiment(STUDY, uri)
        assert open_experiment(STUDY, uri)[0] is first
        assert "1 of 10 seed runs did not finish (FAILED)" in incomplete_note(STUDY, tracking_uri=uri)
    assert open_experiment(STUDY, uri)[0] is not first  # outside the block: a fresh read


def test_load_study_reads_the_store_once_for_its_results_and_note(store, monkeypatch) -> None:
    from harness import load_study
    from harness.results import mlflow_reader

    uri, _ = store
    reads: list[str] = []
    real = mlflow_reader.sqlite_experiment

    def counted(db: Path, name: str):  # the real read, counted
        reads.append(name)
        return real(db, name)

    monkeypatch.setattr(mlflow_reader, "sqlite_experiment", counted)
    analysis = load_study(STUDY, tracking_uri=uri)
    assert reads == [STUDY]
    assert "1 of 10 seed runs did not finish (FAILED)" in analysis.results.phase_note
    assert read_experiment(STUDY, tracking_uri=uri).configs == analysis.results.configs


def test_an_unknown_experiment_lists_those_there(store) -> None:
    uri, _ = store
    with pytest.raises(DataError, match=r"unknown MLflow experiment 'nope' at .*experiments there: Default, other, "
                                         + STUDY):
        read_experiment("nope", tracking_uri=uri)


def test_a_schema_without_a_read_column_is_read_through_mlflow(store, tmp_path: Path) -> None:
    """A store whose tables MLflow changed (here: the metrics table renamed) is not guessed at."""
    _, db = store
    copy = tmp_path / "mlflow.db"
    copy.write_bytes(db.read_bytes())
    con = sqlite3.connect(copy)
    con.execute("ALTER TABLE latest_metrics RENAME COLUMN is_nan TO nan_flag")
    con.commit()
    con.close()
    assert sqlite_experiment(copy, STUDY) is None


def test_harness_table_on_an_sqlite_store_imports_no_mlflow(store) -> None:
    uri, _ = store
    code = ("import sys\nfrom harness.cli import main\n"
            f"rc = main(['table', '--experiment', {STUDY!r}, '--tracking-uri', {uri!r}, '--metric', 'map'])\n"
            "print('RC', rc, 'mlflow' in sys.modules, file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         check=True)
    assert "RC 3 False" in out.stderr, out.stderr[-2000:]  # 3: the study has a FAILED seed run
    assert "| AVG |" in out.stdout

