"""Output piped into a reader that goes away (`harness validate X | head -1`) ends quietly: no
traceback, the shell's SIGPIPE status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["validate", "search_spaces/wsls2021_bm25.yaml", "--no-model"],
                                  ["table", "--from", "tests/present/fixtures/escaping.csv"]])
def test_a_closed_pipe_is_not_a_traceback(argv: list[str], run_cli, monkeypatch) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    # With a reader, the same command succeeds (in this process: the exit status of a real process
    # is what the closed pipe above checks).
    monkeypatch.chdir(ROOT)
    rc, out, err = run_cli(*argv)
    assert rc == 0 and out.strip(), err
