"""A study run from a directory whose name is no URI: a space, a non-ASCII letter, ``<`` and ``%``.

The defaults put everything under the working directory (Tune storage ``runs``, the MLflow store
``mlruns``), so every path the harness hands to Tune, pyarrow, SQLite and MLflow holds these
characters; one small study on the session's Ray, then its table read back from the same store."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from tests.study.conftest import write_study

ODD = "my runs ü<%"


@pytest.mark.slow
def test_a_study_runs_from_a_directory_with_a_space_a_letter_and_percent(
        ray_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    odd = ray_root / ODD
    odd.mkdir()
    monkeypatch.chdir(odd)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = write_study(odd, "odd", storage_path="runs", seeds=[1])
    assert main(["run", str(study)]) == 0, capsys.readouterr().err
    assert (odd / "runs" / "odd-fixed").is_dir()
    assert (odd / "mlruns" / "mlflow.db").is_file()
    assert any((odd / "mlruns" / "artifacts" / "odd").rglob("per_query/test.csv"))
    capsys.readouterr()
    assert main(["table", "--experiment", "odd", "--format", "csv"]) == 0
    assert "baseline" in capsys.readouterr().out
