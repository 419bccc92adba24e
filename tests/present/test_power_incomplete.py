"""`harness power` of a study that is not finished (a seed run FAILED): the analysis, in every
format, carries the `INCOMPLETE study: ...` sentence the table's footnote carries, and the exit is 3.
Only stderr's warning said so: a file written with --output looked like a finished study's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.synthetic import synthetic_records, write_study_records

pytest.importorskip("mlflow")

Cli = Callable[..., tuple[int, str, str]]
NAMES = {"base": "baseline", "better": "better", "same": "same", "worse": "worse"}


def _store(tmp_path: Path, failed: bool) -> str:
    uri = f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    write_study_records(uri, "study", synthetic_records(queries=8), NAMES, failed=failed)
    return uri


def test_power_of_an_unfinished_study_is_marked_in_every_format(tmp_path: Path, run_cli: Cli) -> None:
    uri = _store(tmp_path, failed=True)
    source = ("--experiment", "study", "--tracking-uri", uri, "--seeds", "3")
    rc, _, err = run_cli("table", *source[:4])
    assert rc == 3
    warning = err.strip().splitlines()[-1]
    assert warning.startswith("harness: warning: INCOMPLETE study: 1 of 13 seed runs did not finish (FAILED)")
    note = warning.removeprefix("harness: warning: ")

    rc, out, err = run_cli("power", *source, "--output", str(tmp_path / "p.md"))
    assert rc == 3 and out == "" and err.strip().splitlines()[-1] == warning
    text = (tmp_path / "p.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "**Power: MLflow experiment 'study'**"
    assert lines[2].startswith("INCOMPLETE study: 1 of 13 seed runs did not finish (FAILED); this table holds")
    assert "harness run STUDY --resume" in lines[2] and text.count("INCOMPLETE") == 1

    rc, out, _ = run_cli("power", *source)  # the terminal's too
    assert rc == 3 and out == text

    rc, out, _ = run_cli("power", *source, "--format", "json", "--output", str(tmp_path / "p.json"))
    assert rc == 3 and out == ""
    assert json.loads((tmp_path / "p.json").read_text())["incomplete"] == note


def test_power_of_a_finished_study_is_not_marked(tmp_path: Path, run_cli: Cli) -> None:
    uri = _store(tmp_path, failed=False)
    source = ("--experiment", "study", "--tracking-uri", uri, "--seeds", "3")
    rc, out, err = run_cli("power", *source)
    assert rc == 0 and "INCOMPLETE" not in out + err, err
    rc, out, err = run_cli("power", *source, "--format", "json")
    assert rc == 0 and json.loads(out)["incomplete"] is None, err
