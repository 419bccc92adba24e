"""Reading from a tracking server that is not there fails within seconds, naming the URI (MLflow's
own client would retry for minutes)."""

from __future__ import annotations

import time

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
