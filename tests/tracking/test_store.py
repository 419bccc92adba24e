"""A new SQLite store is a copy of an empty store made once per MLflow version in the harness's cache
(harness.tracking.store): the same schema and schema version as the store MLflow makes itself, its
Default experiment beside it, and MLflow makes the tables itself where the cache cannot be written.
Drivers that open new stores at the same moment all get theirs, whether they race to make the
template as well or copy one made before (docs/reliability.md)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
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


# A driver's first open of its store (argv: the store's URI, the gate file, a name), in a process of
# its own (this session's processes copy a schema template of the suite's: tests/conftest.py):
# MLflow imported, then a ready file beside the gate, then its store and an experiment as soon as
# the gate exists, so that the drivers open their stores at the same moment.
DRIVER = """
import sys, time
from pathlib import Path
import mlflow.store.tracking.sqlalchemy_store
from harness.tracking.store import TrackingStore
go = Path(sys.argv[2])
Path(f"{go}.ready.{sys.argv[3]}").touch()
while not go.exists():
    time.sleep(0.001)
TrackingStore(sys.argv[1]).experiment("study-" + sys.argv[3])
print("ok")
"""


@pytest.mark.slow
def test_new_stores_opened_at_once_are_the_store_mlflow_makes_from_a_template_made_once(tmp_path, monkeypatch):
    """Five drivers open a new store each at the same moment: two with no template in their cache
    (they race to make it too), two with a template made before, here (they copy it; it is not
    made again), and one whose cache cannot be written (a file where its folder would be: MLflow
    makes the tables itself). Every store has the schema MLflow makes."""
    warm = tmp_path / "warm"
    monkeypatch.setenv("HARNESS_CACHE", str(warm))
    TrackingStore(f"sqlite:///{tmp_path / 'first' / 'mlflow.db'}")  # leaves the template in warm/
    template = warm / "mlflow" / f"empty-store-mlflow-{mlflow.__version__}.db"
    assert template.is_file()
    made = template.stat().st_mtime_ns
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    caches = {"cold0": tmp_path / "cold", "cold1": tmp_path / "cold", "warm0": warm, "warm1": warm,
              "own": blocked}
    go = tmp_path / "go"
    procs = {name: subprocess.Popen([sys.executable, "-c", DRIVER, f"sqlite:///{tmp_path / name / 'mlflow.db'}",
                                     str(go), name], env={**os.environ, "HARNESS_CACHE": str(cache)},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, cache in caches.items()}
    deadline = time.monotonic() + 300
    while not all(Path(f"{go}.ready.{name}").exists() for name in caches):  # every driver at the gate
        ended = {name: p.communicate()[1].decode()[-2000:] for name, p in procs.items() if p.poll() is not None}
        assert not ended and time.monotonic() < deadline, ended
        time.sleep(0.05)
    go.touch()
    for p in procs.values():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0 and out.decode().strip() == "ok", err.decode()[-2000:]
    assert (tmp_path / "cold" / "mlflow" / template.name).is_file()
    assert template.stat().st_mtime_ns == made  # made once, copied after
    schemas = {name: _schema(tmp_path / name / "mlflow.db") for name in caches}
    assert all(schema == schemas["own"] for schema in schemas.values())
    assert schemas["own"][1]  # a schema version is recorded
    # the Default experiment beside its store, and the store works as MLflow's own
    second = tmp_path / "warm0" / "mlflow.db"
    default = MlflowClient(f"sqlite:///{second}").get_experiment("0")
    assert default.name == "Default" and default.artifact_location == f"{artifact_root_for(f'sqlite:///{second}')}/0"
    store = TrackingStore(f"sqlite:///{second}")
    exp = store.experiment("study")
    run = store.client.create_run(exp, run_name="r")
    store.client.log_metric(run.info.run_id, "test_map", 0.5)
    assert MlflowClient(f"sqlite:///{second}").get_run(run.info.run_id).data.metrics == {"test_map": 0.5}
    # ... and each store holds its own experiments only
    for name in caches:
        names = {e.name for e in MlflowClient(f"sqlite:///{tmp_path / name / 'mlflow.db'}").search_experiments()}
        assert names == {"Default", f"study-{name}", *(["study"] if name == "warm0" else [])}, (name, names)
