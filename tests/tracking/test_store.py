"""A new SQLite store is a copy of an empty store made once per MLflow version in the harness's cache
(harness.tracking.store): the same schema and schema version as the store MLflow makes itself, its
Default experiment beside it, and MLflow makes the tables itself where the cache cannot be written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from harness.tracking.store import TrackingStore, artifact_root_for


def _schema(db: Path) -> tuple[list[tuple[str, str]], list[tuple]]:
    con = sqlite3.connect(db)
    try:
        sql = sorted(con.execute("SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        version = con.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        con.close()
    return sql, version


def test_a_new_store_is_the_store_mlflow_makes_from_a_template_made_once(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    template = cache / "mlflow" / f"empty-store-mlflow-{mlflow.__version__}.db"
    first = tmp_path / "a" / "mlflow.db"
    TrackingStore(f"sqlite:///{first}")
    assert template.is_file()
    made = template.stat().st_mtime_ns
    second = tmp_path / "b" / "mlflow.db"
    store = TrackingStore(f"sqlite:///{second}")
    assert template.stat().st_mtime_ns == made  # made once, copied after
    # MLflow's own store, where the cache cannot be written (a file where its folder would be)
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    monkeypatch.setenv("HARNESS_CACHE", str(blocked))
    own = tmp_path / "c" / "mlflow.db"
    TrackingStore(f"sqlite:///{own}")
    assert not (blocked / "mlflow").exists()
    assert _schema(second) == _schema(own) == _schema(first)
    assert _schema(own)[1]  # a schema version is recorded
    # the Default experiment beside its store, and the store works as MLflow's own
    default = MlflowClient(f"sqlite:///{second}").get_experiment("0")
    assert default.name == "Default" and default.artifact_location == f"{artifact_root_for(f'sqlite:///{second}')}/0"
    exp = store.experiment("study")
    run = store.client.create_run(exp, run_name="r")
    store.client.log_metric(run.info.run_id, "test_map", 0.5)
    assert MlflowClient(f"sqlite:///{second}").get_run(run.info.run_id).data.metrics == {"test_map": 0.5}
    assert not MlflowClient(f"sqlite:///{first}").search_experiments(filter_string="name = 'study'")
