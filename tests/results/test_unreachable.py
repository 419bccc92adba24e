"""Reading from a tracking server that is not there fails within seconds, naming the URI (MLflow's
own client would retry for minutes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli import main

CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port


@pytest.mark.parametrize("command", ["table", "power"])
def test_unreachable_tracking_server_fails_fast(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    assert main([command, "--experiment", "x", "--tracking-uri", CLOSED]) == 2
    assert time.monotonic() - start < 15
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"tracking URI {CLOSED} is not reachable" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_users_own_mlflow_settings_win(monkeypatch):
    import os

    from harness.results.mlflow_reader import FAST_FAIL_ENV, _env_defaults

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "9")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    with _env_defaults(**FAST_FAIL_ENV):
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "9"
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == FAST_FAIL_ENV["MLFLOW_HTTP_REQUEST_TIMEOUT"]
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "9"
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ


# The database stores MLflow takes, whose drivers this machine does not have (the project installs none).
DATABASES = [("postgresql://user:secret@127.0.0.1:9/db", "psycopg", "psycopg[binary]"),
             ("mysql://127.0.0.1:9/db", "MySQLdb", "mysqlclient"),
             ("mysql+pymysql://127.0.0.1:9/db", "pymysql", "pymysql"),
             ("mssql://127.0.0.1:9/db", "pyodbc", "pyodbc")]


@pytest.mark.parametrize("uri, module, package", DATABASES)
@pytest.mark.parametrize("argv", [("table", "--experiment", "x"), ("power", "--experiment", "x"),
                                  ("report", "--experiment", "x", "--to", "page.html"),
                                  ("runs", "export", "--experiment", "x", "--to", "out"), ("ui",),
                                  ("validate", "--no-model", "STUDY")])
def test_a_database_store_without_its_driver_is_one_line(tmp_path, capsys, monkeypatch, argv, uri, module,
                                                         package):
    """A database tracking URI whose driver is not installed was a ModuleNotFoundError traceback from
    deep in SQLAlchemy; it names the driver and its package, the password redacted."""
    import importlib.util
    import shutil

    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    monkeypatch.chdir(tmp_path)
    shutil.copy(Path(__file__).parents[2] / "search_spaces" / "quickstart.yaml", "study.yaml")
    argv = tuple("study.yaml" if a == "STUDY" else a for a in argv)
    assert main([*argv, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    scheme = uri.partition("://")[0]
    shown = uri.replace("user:secret@", "***@")
    assert err == [(f"harness: error: tracking URI {shown}: a {scheme} store needs the database driver {module}, "
                   f"which is not installed: pip install '{package}'")], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]
