"""Every run of one study's MLflow experiment, read once for a table or a report.

``harness table`` and ``harness report`` read the same runs several times (the configurations, the
seed runs, the incomplete-study note, the report's dev curves). An ``ExperimentSnapshot`` holds
them, each kind fetched once, so one command makes one read of the store.

Two sources give the same runs:
- an SQLite store (the default ``./mlruns/mlflow.db``) is read directly, read-only, with Python's
  sqlite3: every active run of the experiment, its tags and its latest metrics in three queries.
  Opening it through MLflow's client would import MLflow's tracking server code and its SQLAlchemy
  store first, several times the work of the read itself. The columns read are MLflow's own
  (tables ``experiments``, ``runs``, ``tags``, ``latest_metrics``, ``metrics``); a store whose
  tables lack one of them is read through MLflow instead;
- any other store (an MLflow server) through ``MlflowClient.search_runs``, one query per kind.

A run here has the attributes the readers use of MLflow's ``Run``: ``info.run_id``,
``info.run_name``, ``info.status``, ``info.start_time``, ``info.artifact_uri``, ``data.tags``,
``data.metrics`` (the latest value of each metric, as MLflow's search gives). Runs come newest
first, as MLflow's search returns them (start time descending, then run id). Deleted runs are left
out, as MLflow's search leaves them out.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.tracking import conventions as C

# The columns of MLflow's SQLite schema this module reads; all of them since MLflow 1.x.
COLUMNS = {
    "experiments": {"experiment_id", "name"},
    "runs": {"run_uuid", "name", "status", "start_time", "artifact_uri", "experiment_id", "lifecycle_stage"},
    "tags": {"key", "value", "run_uuid"},
    "latest_metrics": {"key", "value", "step", "is_nan", "run_uuid"},
    "metrics": {"key", "value", "step", "timestamp", "is_nan", "run_uuid"},
}
DEFAULT_WORKSPACE = "default"  # MLflow 3's workspaces: a store without them has one, this one


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    run_name: str
    status: str
    start_time: int | None
    artifact_uri: str


@dataclass(frozen=True)
class RunData:
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredRun:
    """A run as MLflow's search gives it (module docstring)."""

    info: RunInfo
    data: RunData


Point = tuple[int, int, float]  # (step, timestamp, value) of one logged metric value


class ExperimentSnapshot:
    """The runs of experiment ``experiment_id``, each kind (tag harness.kind) read once;
    ``client()`` is MLflow's client on the store, made on first use (artifacts of a remote
    artifact root)."""

    def __init__(self, experiment_id: str, client: Callable[[], Any]) -> None:
        self.experiment_id = experiment_id
        self._client_factory = client
        self._client: Any = None
        self._kinds: dict[str, list[Any]] = {}
        self._history: dict[str, dict[str, list[Point]]] = {}

    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def runs(self, kind: str) -> list[Any]:
        """Every run of ``kind`` (harness.tracking.conventions.KIND_*), newest first."""
        if kind not in self._kinds:
            self._kinds[kind] = self._fetch(kind)
        return self._kinds[kind]

    def metric_history(self, run_id: str, key: str) -> list[Point]:
        """Every logged value of metric ``key`` of run ``run_id``."""
        return [(int(p.step), int(p.timestamp), float(p.value))
                for p in self.client().get_metric_history(run_id, key)]

    def _fetch(self, kind: str) -> list[Any]:
        from harness.tracking.records import iter_runs

        return list(iter_runs(self.client(), self.experiment_id, kind))


class SqliteSnapshot(ExperimentSnapshot):
    """An ``ExperimentSnapshot`` read directly from an SQLite store (module docstring)."""

    def __init__(self, db: Path, experiment_id: str, client: Callable[[], Any]) -> None:
        super().__init__(experiment_id, client)
        self.db = db
        self._all: list[StoredRun] | None = None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"{self.db.resolve().as_uri()}?mode=ro", uri=True, timeout=30)

    def _fetch(self, kind: str) -> list[Any]:
        if self._all is None:
            self._all = self._read_all()
        return [r for r in self._all if r.data.tags.get(C.TAG_KIND) == kind]

    def _read_all(self) -> list[StoredRun]:
        active = "r.experiment_id = ? AND r.lifecycle_stage = 'active'"
        con = self._connect()
        try:
            rows = con.execute("SELECT r.run_uuid, r.name, r.status, r.start_time, r.artifact_uri FROM runs r "
                               f"WHERE {active} ORDER BY r.start_time DESC, r.run_uuid",
                               (self.experiment_id,)).fetchall()
            tags: dict[str, dict[str, str]] = {r[0]: {} for r in rows}
            for run_id, key, value in con.execute(
                    f"SELECT t.run_uuid, t.key, t.value FROM tags t JOIN runs r ON t.run_uuid = r.run_uuid WHERE {active}",
                    (self.experiment_id,)):
                tags[run_id][key] = value
            metrics: dict[str, dict[str, float]] = {r[0]: {} for r in rows}
            for run_id, key, value, is_nan in con.execute(
                    "SELECT m.run_uuid, m.key, m.value, m.is_nan FROM latest_metrics m "
                    f"JOIN runs r ON m.run_uuid = r.run_uuid WHERE {active}", (self.experiment_id,)):
                metrics[run_id][key] = math.nan if is_nan else float(value)
        finally:
            con.close()
        return [StoredRun(RunInfo(run_id, name or "", status, start, uri or ""),
                          RunData(tags[run_id], metrics[run_id]))
                for run_id, name, status, start, uri in rows]

    def metric_history(self, run_id: str, key: str) -> list[Point]:
        if key not in self._history:
            con = self._connect()
            try:
                found: dict[str, list[Point]] = {}
                for rid, step, timestamp, value, is_nan in con.execute(
                        "SELECT m.run_uuid, m.step, m.timestamp, m.value, m.is_nan FROM metrics m JOIN runs r "
                        "ON m.run_uuid = r.run_uuid WHERE r.experiment_id = ? AND m.key = ?",
                        (self.experiment_id, key)):
                    found.setdefault(rid, []).append((int(step), int(timestamp or 0),
                                                      math.nan if is_nan else float(value)))
            finally:
                con.close()
            self._history[key] = found
        return list(self._history[key].get(run_id, []))


# sqlite_experiment's answer for an experiment in MLflow's trash (deleted in the UI, not yet purged).
DELETED = "deleted"


def sqlite_experiment(db: Path, name: str) -> tuple[str | None, list[str]] | None:
    """(id of experiment ``name``, DELETED where it is in MLflow's trash, or None where there is
    none; the names of the store's active experiments) read directly from the SQLite store ``db``;
    None where its tables lack a column this module reads (a schema MLflow changed: read it
    through MLflow)."""
    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        have = {table: {row[1] for row in con.execute(f"PRAGMA table_info({table})")} for table in COLUMNS}
        if any(not need <= have[table] for table, need in COLUMNS.items()):
            return None
        where = " WHERE workspace = ?" if "workspace" in have["experiments"] else ""
        args = (DEFAULT_WORKSPACE,) if where else ()
        stage = ", lifecycle_stage" if "lifecycle_stage" in have["experiments"] else ", 'active'"
        experiments = con.execute(f"SELECT experiment_id, name{stage} FROM experiments{where}", args).fetchall()
    finally:
        con.close()
    # as MLflow: an experiment is found by name even when deleted, and listed only when active;
    # a deleted one is DELETED, which its reader refuses (harness.results.mlflow_reader)
    found = next((str(eid) if lifecycle == "active" else DELETED for eid, n, lifecycle in experiments
                  if n == name), None)
    return found, sorted(n for _, n, lifecycle in experiments if lifecycle == "active")
