"""`harness export` and `model.name` refuse a folder they cannot use before reading a run or building
data, in one line naming the folder the user gave (tests/model/test_export.py, heavy, exports
the runs of a real study)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error: "), err
    return err[0]


@pytest.mark.parametrize("target, problem", [
    ("afile/sub", "{tmp}/afile is a file, not a directory"),
    ("afile", "exists and is not an empty directory"),
])
def test_export_to_a_place_it_cannot_write_names_that_place(tmp_path: Path, capsys, target, problem):
    # It read the run, then named a temporary folder beside the target (afile/.export-x: Not a directory).
    (tmp_path / "afile").write_text("")
    missing_store = f"sqlite:///{tmp_path / 'nowhere' / 'mlflow.db'}"  # never opened: refused first
    assert main(["export", "0" * 32, "--to", str(tmp_path / target), "--tracking-uri", missing_store]) == 2
    assert f"--to {tmp_path / target}: {problem.format(tmp=tmp_path)}" in _one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_an_exported_ranker_is_no_encoder_to_train_from(tmp_path: Path, capsys, monkeypatch):
    """A folder `harness export` wrote (its harness_export.json beside config.json) passed the
    check as an encoder; transformers then asked "run the custom code? [y/N]" twice, and the error
    called it a folder without a model, after the data was built."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    ranker = tmp_path / "ranker"
    ranker.mkdir()
    (ranker / "config.json").write_text(json.dumps({"model_type": "harness_bert"}))
    (ranker / "harness_export.json").write_text("{}")
    assert main(["train", "--no-mlflow", "--set", "model.name=./ranker"]) == 2
    assert ("--set model.name=./ranker: model.name './ranker': a ranker `harness export` wrote, which its "
            "loaders read (docs/exchange.md), not an encoder to train from; name the encoder it was trained "
            "from") in _one_line(capsys)
    assert not (tmp_path / "cache").exists()
