"""A new SQLite store is a copy of an empty store made once per MLflow version in the harness's cache
(harness.tracking.store): the same schema and schema version as the store MLflow makes itself, its
Default experiment beside it, and MLflow makes the tables itself where the cache cannot be written."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from harness.tracking.store import TrackingStore, artifact_root_for


def _schema(db: Path) -> tuple[dict[str, list[str]], list[tuple]]:
    """Each table's and index's definition as its sorted clauses (MLflow's migrations write a
    table's constraints in an order that differs between processes), and the schema version."""
    con = sqlite3.connect(db)
    try:
        sql = {name: sorted(line.strip().rstrip(",") for line in (text or "").splitlines())
               for name, text in con.execute("SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
        version = con.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        con.close()
    return sql, version


def _new_stores(*stores: tuple[Path, Path]) -> None:
    """Each (store ``db``, cache) pair: a driver's first open of the store, in a process of its own
    (this session's processes copy a schema template of the suite's: tests/conftest.py); the
    processes run side by side."""
    code = "import sys; from harness.tracking.store import TrackingStore; TrackingStore(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, f"sqlite:///{db}"],
                              env={**os.environ, "HARNESS_CACHE": str(cache)}) for db, cache in stores]
    assert [p.wait(timeout=600) for p in procs] == [0] * len(procs)


@pytest.mark.slow
def test_a_new_store_is_the_store_mlflow_makes_from_a_template_made_once(tmp_path):
    cache = tmp_path / "cache"
    template = cache / "mlflow" / f"empty-store-mlflow-{mlflow.__version__}.db"
    first = tmp_path / "a" / "mlflow.db"
    # beside it, MLflow's own store, where the cache cannot be written (a file where its folder would be)
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    own = tmp_path / "c" / "mlflow.db"
    _new_stores((first, cache), (own, blocked))
    assert template.is_file()
    made = template.stat().st_mtime_ns
    second = tmp_path / "b" / "mlflow.db"
    _new_stores((second, cache))
    assert template.stat().st_mtime_ns == made  # made once, copied after
    assert _schema(second) == _schema(own) == _schema(first)
    assert _schema(own)[1]  # a schema version is recorded
    # the Default experiment beside its store, and the store works as MLflow's own
    default = MlflowClient(f"sqlite:///{second}").get_experiment("0")
    assert default.name == "Default" and default.artifact_location == f"{artifact_root_for(f'sqlite:///{second}')}/0"
    store = TrackingStore(f"sqlite:///{second}")
    exp = store.experiment("study")
    run = store.client.create_run(exp, run_name="r")
    store.client.log_metric(run.info.run_id, "test_map", 0.5)
    assert MlflowClient(f"sqlite:///{second}").get_run(run.info.run_id).data.metrics == {"test_map": 0.5}
    assert not MlflowClient(f"sqlite:///{first}").search_experiments(filter_string="name = 'study'")
