"""`harness train --config` refuses a file over the YAML size limit in a config file's words: it
said "list fewer configurations or seeds, or split the study", a study file's way out, of a file
that holds one configuration's keys."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import MAX_YAML_BYTES


def test_an_oversized_config_file_is_refused_as_a_config_file(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:  # sparse: the size is what is checked, before a byte is read
        fh.truncate(MAX_YAML_BYTES + 1)
    start = time.monotonic()
    assert main(["train", "--config", str(big), "--no-mlflow"]) == 2
    assert time.monotonic() - start < 5
    out, err = capsys.readouterr()
    expected = (f"harness: error: --config {big}: a config file holds at most {MAX_YAML_BYTES // 1024} KiB, "
                f"this one {MAX_YAML_BYTES + 1} bytes; it sets the keys of one configuration (a few lines): is it "
                "the file you meant?")
    assert out == "" and err.strip().splitlines() == [expected]
    assert "study" not in err and "seeds" not in err


def test_a_config_file_within_the_limit_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = tmp_path / "ok.yaml"
    ok.write_text("train:\n  lr: -1\n" + "#" * (MAX_YAML_BYTES - 40) + "\n")
    assert main(["train", "--config", str(ok), "--no-mlflow"]) == 2
    assert f"{ok}:2: train.lr" in capsys.readouterr().err  # past the size check, to the key's own refusal
