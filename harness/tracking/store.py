"""The one writer of MLflow records (docs/architecture.md, "MLflow records"), driven from the driver only.

It talks to MLflow through ``MlflowClient`` with explicit run ids (no global active run), so a study
driver can keep several runs open and nest them with ``mlflow.parentRunId``. The default store is a
SQLite database under ./mlruns with an absolute path and an absolute artifact root, created here
before any trial starts (parallel first creation of a SQLite store fails). An http(s) store is
pinged first (``check_reachable``): an unreachable server fails within seconds, naming the URI.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from harness.cachedir import cache_home
from harness.errors import ConfigError, DataError, HarnessError
from harness.redact import SECRET_MARKERS, redact_uri, strip_credentials
from harness.tracking import conventions as C

REACH_TIMEOUT_S = 5.0  # the tracking server's REST API answers at once; a dead one must fail fast
# ``default_tracking_uri`` in words: the default every command's --tracking-uri help states
DEFAULT_STORE = "$MLFLOW_TRACKING_URI, else ./mlruns/mlflow.db"


def default_tracking_uri(root: str | os.PathLike[str] | None = None) -> str:
    """$MLFLOW_TRACKING_URI, else sqlite:////<abs>/mlruns/mlflow.db under ``root`` (default: cwd)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env and root is None:
        return env
    base = Path(root or os.getcwd()).resolve() / "mlruns"
    return f"sqlite:///{base / 'mlflow.db'}"


def check_reachable(uri: str, timeout: float = REACH_TIMEOUT_S) -> None:
    """For an http(s) tracking URI: the server answers as an MLflow tracking server within
    ``timeout`` seconds, else one line naming the URI (credentials redacted): "... is not
    reachable: ..." (MLflow's own client would retry for minutes) or "... is not an MLflow tracking
    server". The probe asks MLflow's REST API for one experiment; it sends no credentials (the
    URI's userinfo is stripped), so a server that demands a login (401, 403) counts as there.
    """
    if not uri.startswith(("http://", "https://")):
        return
    import json
    import urllib.error
    import urllib.request

    shown = redact_uri(uri)
    probe = strip_credentials(uri).rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1"
    try:
        with urllib.request.urlopen(probe, timeout=timeout) as answer:
            body = answer.read(1 << 16)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return
        raise HarnessError(f"tracking URI {shown} is not an MLflow tracking server (its REST API "
                           f"answered HTTP {exc.code}); give the address `mlflow server` listens on") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise HarnessError(f"tracking URI {shown} is not reachable: {reason}") from None
    try:
        ok = isinstance(json.loads(body), dict)
    except ValueError:
        ok = False
    if not ok:
        raise HarnessError(f"tracking URI {shown} is not an MLflow tracking server (its REST API did "
                           "not answer JSON); give the address `mlflow server` listens on")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI; None for other stores.

    The path goes into the URI as written (the store's default is ``./mlruns`` under the working
    directory): SQLAlchemy, which opens the database, reads a ``?`` in it as the start of a query
    and decodes a %-escape such as ``%20``, while MLflow makes the database's directory from the
    text as written, so no quoting suits both; such a path is refused. A space, ``%`` without two
    hex digits after it, ``<`` or a non-ASCII letter read the same to both."""
    if not uri.startswith("sqlite:///"):
        return None
    text = uri[len("sqlite:///"):]
    if "?" in text or unquote(text) != text:
        raise HarnessError(f"tracking URI {redact_uri(uri)}: a SQLite path cannot hold '?' or a %-escape such as "
                           "%20 (SQLAlchemy reads them as URI syntax); pass --tracking-uri with a path "
                           "without them, or run from another directory")
    return Path(text)


def artifact_root_for(uri: str) -> str | None:
    """Absolute artifact root beside a SQLite store (a quoted ``file://`` URI); None (server
    default) for other stores."""
    db = sqlite_path(uri)
    return None if db is None else (db.parent / "artifacts").resolve().as_uri()


def store_size(db: Path) -> int | None:
    """The size of the SQLite file ``db``, None where nothing is there; a path the filesystem
    refuses (a name too long for it, a folder that may not be searched) is one line naming it."""
    try:
        return db.stat().st_size if db.exists() else None
    except OSError as exc:
        raise HarnessError(f"MLflow store {db}: {exc.strerror or exc}; pass --tracking-uri with a path this "
                           "machine can open, or set MLFLOW_TRACKING_URI") from None


def check_sqlite_store(db: Path, *, may_create: bool = False) -> None:
    """The SQLite file ``db`` is an MLflow store, checked read-only (opening it through MLflow would
    create its tables in an empty file, and a damaged one fails deep in SQLAlchemy): one line when it
    is missing (unless ``may_create``), empty (unless ``may_create``: a new store), a directory,
    not an SQLite database, damaged, or a database without MLflow's tables."""
    import sqlite3

    from harness.textfile import file_kind

    kind, size = file_kind(db), store_size(db)
    if kind:
        raise HarnessError(f"MLflow store {db}: is {kind}, not an SQLite file")
    if not size:
        if may_create:
            return
        raise HarnessError(f"no MLflow store at {db}" + (" (the file is empty)" if size is not None else "")
                           + "; pass --tracking-uri or set MLFLOW_TRACKING_URI")
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "experiments" in tables:
                con.execute("SELECT count(*) FROM experiments").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:  # not a database, malformed, truncated
        raise HarnessError(f"MLflow store {db}: not a readable SQLite database ({exc}); restore it from "
                           "a backup, or point --tracking-uri at another store") from None
    if not {"experiments", "runs", "alembic_version"} <= tables:
        raise HarnessError(f"MLflow store {db}: an SQLite database without MLflow's tables (experiments, "
                           "runs); point --tracking-uri at an MLflow store")


# MLflow's database stores beside SQLite (mlflow.store.db.db_types), and the pip package of each
# driver SQLAlchemy imports for them.
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
_DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient",
                    "pymysql": "pymysql", "pyodbc": "pyodbc"}


def check_database_driver(uri: str) -> None:
    """For a database tracking URI (``postgresql://``, ``mysql+pymysql://``, ...): the driver
    SQLAlchemy would import for it is installed, else one line naming it and its pip package (a
    missing one was a traceback from deep in SQLAlchemy, in every command that opened the store)."""
    scheme = uri.partition("://")[0]
    if scheme.partition("+")[0] not in DATABASE_SCHEMES:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(uri).get_dialect().import_dbapi()
    except ImportError as exc:
        package = _DRIVER_PACKAGES.get(exc.name or "", exc.name)
        raise HarnessError(f"tracking URI {redact_uri(uri)}: a {scheme} store needs the database driver "
                           f"{exc.name}, which is not installed: pip install '{package}'") from None
    except ArgumentError as exc:  # NoSuchModuleError too: an unknown driver after the +
        raise HarnessError(f"tracking URI {redact_uri(uri)}: {str(exc).splitlines()[0]}") from None


def check_existing_store(uri: str) -> None:
    """For a command that reads a store (table, export, ui): a missing or damaged SQLite store, an
    unreachable server, or a folder store (a file: URI or a bare path, which MLflow 3 refuses
    unless MLFLOW_ALLOW_FILE_STORE is set) is one line, at once, and nothing is created, not even a
    folder for a mistyped path."""
    db = sqlite_path(uri)
    if db is not None:
        from harness.textfile import file_kind

        if store_size(db) is None and not file_kind(db):
            raise DataError(f"no MLflow store at {db} (tracking URI {redact_uri(uri)}); pass --tracking-uri "
                            "or set MLFLOW_TRACKING_URI")
        check_sqlite_store(db)  # read-only: never creates tables in an empty file
    else:
        check_folder_store(uri)
    check_database_driver(uri)
    check_reachable(uri)


def check_folder_store(uri: str) -> None:
    """A folder store (a file: URI or a bare path), which MLflow 3 refuses unless opted in
    (MLFLOW_ALLOW_FILE_STORE), is one line, not MLflow's exception from deep in its client."""
    if not ((uri.startswith("file:") or ("://" not in uri and not uri.startswith("databricks")))
            and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("1", "true")):
        return
    path = Path(uri.removeprefix("file://")).expanduser()
    hint = (f"; {path} is a file: for an SQLite store write sqlite:///{path.resolve()}"
            if path.is_file() else "")
    raise HarnessError(f"tracking URI {redact_uri(uri)}: a folder store, which MLflow 3 keeps only for "
                       "migration (`mlflow migrate-filestore`; MLFLOW_ALLOW_FILE_STORE=true opts in); use "
                       f"an SQLite store (sqlite:///...) or a tracking server{hint}")


def create_sqlite_store(uri: str, db: Path) -> None:
    """Open the SQLite store ``db`` under a file lock beside it (``<db>.lock``, left there): checked
    (``check_sqlite_store``), its tables made if it is new. Drivers starting together on a new
    store take turns; the second finds the tables made instead of racing to make them."""
    import fcntl

    lock = db.with_name(db.name + ".lock")
    try:
        fh = open(lock, "a")  # noqa: SIM115 (held across the creation below)
    except OSError as exc:
        raise HarnessError(f"tracking URI {redact_uri(uri)}: cannot lock {lock}: {exc.strerror or exc}") from None
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        check_sqlite_store(db, may_create=True)  # under the lock: never a half-made store
        if not db.exists() or db.stat().st_size == 0:
            _copy_empty_store(uri, db)
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
        from sqlalchemy.exc import SQLAlchemyError

        try:
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)  # creates the tables
        except (MlflowException, SQLAlchemyError) as exc:
            raise HarnessError(f"tracking URI {redact_uri(uri)}: cannot open the store: "
                               f"{str(exc).splitlines()[0][:300]}") from None


def _empty_store_template() -> Path | None:
    """A new, empty MLflow store for the installed MLflow, made once per version in the harness's
    cache (harness.cachedir: the data cache's folder) and kept there:
    making a store's tables runs every one of MLflow's schema migrations, seconds that each new
    study would otherwise pay. None where the cache cannot be written (MLflow then makes the tables
    itself)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    folder = cache_home() / "mlflow"
    template = folder / f"empty-store-mlflow-{mlflow.__version__}.db"
    if template.is_file():
        return template
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".empty-store-", suffix=".db")
        os.close(fd)
        os.unlink(tmp)  # MLflow makes the file (an empty one it would refuse as no database)
        try:
            MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
            os.replace(tmp, template)  # whole or not at all: drivers making it at once each rename theirs
        finally:
            Path(tmp).unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 (any failure: the store is made the slow way, as before)
        return None
    return template


def _copy_empty_store(uri: str, db: Path) -> None:
    """Make the new store ``db`` a copy of the empty template (``_empty_store_template``), its
    Default experiment's artifacts beside the store (``artifact_root_for``) and dated now; replaced
    whole (no reader sees a half-copied file). Nothing happens without a template."""
    import shutil
    import sqlite3
    import time

    template = _empty_store_template()
    if template is None:
        return
    tmp = db.with_name(f".{db.name}.{os.getpid()}.new")
    try:
        shutil.copyfile(template, tmp)
        con = sqlite3.connect(tmp)
        try:
            now = int(time.time() * 1000)
            con.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                        "WHERE experiment_id = 0", (f"{artifact_root_for(uri)}/0", now, now))
            con.commit()
        finally:
            con.close()
        os.replace(tmp, db)
    except (OSError, sqlite3.Error):
        tmp.unlink(missing_ok=True)  # MLflow makes the tables itself


class TrackingStore:
    """Creates the store and experiment up front; writes runs, params, metrics and artifacts."""

    def __init__(self, uri: str | None = None) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = uri or default_tracking_uri()
        check_reachable(self.uri)
        db = sqlite_path(self.uri)
        if db is not None:
            try:
                db.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HarnessError(f"tracking URI {redact_uri(self.uri)}: cannot create {db.parent}: "
                                   f"{exc.strerror or exc}") from None
            create_sqlite_store(self.uri, db)
        mlflow.set_tracking_uri(self.uri)
        self.client = MlflowClient(tracking_uri=self.uri)

    def experiment(self, name: str, *, create: bool = True) -> str:
        from mlflow.exceptions import MlflowException

        try:
            exp = self.client.get_experiment_by_name(name)
            if exp is not None:
                return str(exp.experiment_id)
            if not create:
                raise HarnessError(f"MLflow experiment {name!r} does not exist at {redact_uri(self.uri)}")
            if C.name_problem(name):  # its artifacts go to <artifact root>/<name>
                raise ConfigError(f"MLflow experiment name: {C.name_problem(name)}")
            # Its kind: MLflow's UI opens it on its runs table (conventions.TAG_EXPERIMENT_KIND).
            return str(self.client.create_experiment(name, artifact_location=artifact_root_for(self.uri)
                                                     and f"{artifact_root_for(self.uri)}/{name}",
                                                     tags={C.TAG_EXPERIMENT_KIND: C.EXPERIMENT_KIND}))
        except MlflowException as exc:
            raise HarnessError(f"tracking URI {redact_uri(self.uri)}: {str(exc).splitlines()[0]}") from None

    def start_run(self, experiment_id: str, name: str, tags: Mapping[str, str],
                  parent: str | None = None) -> str:
        all_tags = dict(tags)
        if parent:
            all_tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(experiment_id, run_name=name, tags=all_tags)
        return str(run.info.run_id)

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, param_value(v)) for k, v in sorted(params.items()) if not _is_secret(k)]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, step) for k, v in metrics.items()
                 if v is not None and math.isfinite(float(v))]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i:i + 500])

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.client.log_text(run_id, text, artifact_file)

    def log_json(self, run_id: str, obj: Any, artifact_file: str) -> None:
        self.client.log_text(run_id, json.dumps(obj, indent=2, sort_keys=True, default=str), artifact_file)

    def log_file(self, run_id: str, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def log_per_query(self, run_id: str, per_query: Mapping[str, Mapping[str, float]]) -> None:
        """per_query {measure: {qid: value}} as the per_query/test.csv artifact."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(C.PER_QUERY_COLUMNS)
        for measure in sorted(per_query):
            for qid, value in sorted(per_query[measure].items()):
                w.writerow((qid, measure, repr(float(value))))
        self.client.log_text(run_id, buf.getvalue(), C.PER_QUERY_ARTIFACT)

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def download_text(self, run_id: str, artifact_file: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            local = self.client.download_artifacts(run_id, artifact_file, tmp)
            return Path(local).read_text()


def _is_secret(key: str) -> bool:
    k = key.lower()
    return any(m in k for m in SECRET_MARKERS)


def param_value(v: Any) -> str:
    """A value as MLflow holds it as a param (a list or tuple comma-joined)."""
    if isinstance(v, list | tuple):
        return ",".join(str(x) for x in v)
    return str(v)
