"""One validation before anything is spent: validate, run and submit refuse the same study, each
with one line, without preparing data, training or contacting a cluster."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
# The file these tests are about (cascade exits beyond the tiny encoder), as a user writes it; it is
# refused before any data or training, so it needs none of write_study's budget.
DEEP_EXITS = """\
name: deep
defaults:
  model.name: tiny
  train.steps: 4
cascade: {enabled: true, exits: [2, 8], alpha: [0.3]}
seeds: [1, 2]
"""
CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error: "), err
    return err[0]


def _nothing_written(root: Path) -> None:
    assert sorted(p.name for p in root.iterdir()) == ["study.yaml"]


@pytest.fixture
def deep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path = tmp_path / "study.yaml"
    path.write_text(DEEP_EXITS)
    return path


@pytest.mark.parametrize("command", [
    ["validate", "--no-model"],
    ["validate"],
    ["run"],
    # The address is never contacted: the refusal comes before the job server is.
    ["submit", "--address", CLOSED, "--tracking-uri", CLOSED, "--skip-tracking-check"],
])
def test_cascade_exits_beyond_the_encoder_are_refused_everywhere(deep, capsys, command):
    assert main([command[0], str(deep), *command[1:]]) == 2
    line = _one_line(capsys)
    assert "cascade.exits=[2, 8]: layer 8 is beyond the 4-layer encoder of model.name=tiny" in line
    _nothing_written(deep.parent)


def test_run_with_an_unreachable_tracking_server_fails_fast_and_writes_nothing(deep, capsys):
    deep.write_text(DEEP_EXITS.replace("exits: [2, 8]", "exits: [2, 4]"))
    start = time.monotonic()
    assert main(["run", str(deep), "--tracking-uri", CLOSED]) == 2
    assert time.monotonic() - start < 15
    line = _one_line(capsys)
    assert f"tracking URI {CLOSED} is not reachable" in line
    _nothing_written(deep.parent)


def test_submit_with_an_unreachable_tracking_server_is_refused_before_the_cluster(deep, capsys):
    deep.write_text(DEEP_EXITS.replace("exits: [2, 8]", "exits: [2, 4]"))
    assert main(["submit", str(deep), "--address", "http://127.0.0.1:9", "--tracking-uri", CLOSED]) == 2
    assert f"tracking URI {CLOSED} is not reachable" in _one_line(capsys)


def test_encoder_depth_without_weights():
    from harness.model.encoder import encoder_depth

    assert encoder_depth("tiny") == 4
    assert encoder_depth("packaged") == 6
    assert encoder_depth("no-such-hub-model") is None


def test_validate_checks_a_study_without_loading_torch() -> None:
    """`harness validate --no-model` (and `harness submit`, which runs the same checks first) answers
    in about a second: it checks the study without importing torch or the tokenizers, which only data
    preparation and building the model need."""
    import subprocess
    import sys

    code = ("import sys; from harness.cli import main; rc = main(['validate', '--no-model', 'search_spaces/quickstart.yaml']); "
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-3:] == ["0", "False", "False"], out.stdout + out.stderr
