"""`harness table` refusals that must stay one short line and come before any work: a long
``--levels`` list is shown abbreviated, not echoed whole; a ``--plots`` folder that cannot be made
is refused before the source is read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.analysis import TableOptions
from harness.errors import ConfigError
from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]


def test_a_long_levels_list_is_shown_abbreviated(tmp_path: Path, run_cli: Cli) -> None:
    """500 increasing levels were echoed whole (3.5 KB on one line); the refusal shows them as
    ``shown`` does, a few values and "..."."""
    src = write_long_csv(tmp_path / "r.csv", synthetic_records())
    levels = [f"{0.4 + i / 1000:.3f}" for i in range(500)]
    rc, out, err = run_cli("table", "--from", str(src), "--levels", *levels)
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "levels must be strictly decreasing values in (0, 1)" in line and "..." in line
    assert len(line) < 200 and "0.899" not in line
    with pytest.raises(ConfigError, match=r"levels must be .*\.\.\.") as info:
        TableOptions(levels=[float(a) for a in levels])
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("where", ["file", "under-file", "dev-null"])
def test_a_plots_folder_that_cannot_be_made_is_refused_before_any_output(tmp_path: Path, run_cli: Cli,
                                                                         where: str) -> None:
    """`--plots` naming a file (or /dev/null) ran the analysis and wrote --output first, then failed
    with "map.png: cannot write the plot: ...: File exists"; it is refused in one line naming
    --plots, before the source is read and before --output is written."""
    src = write_long_csv(tmp_path / "r.csv", synthetic_records())
    existing = tmp_path / "plots.txt"
    existing.write_text("not a folder\n")
    plots = {"file": existing, "under-file": existing / "sub", "dev-null": Path("/dev/null")}[where]
    output = tmp_path / "t.md"
    rc, out, err = run_cli("table", "--from", str(src), "--output", str(output), "--plots", str(plots))
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"harness: error: --plots {plots}: ") and "not a directory" in line
    assert not output.exists() and existing.read_text() == "not a folder\n"
    # before the source is read: a missing --from file is not what is reported
    rc, _, err = run_cli("table", "--from", str(tmp_path / "missing.csv"), "--plots", str(plots))
    assert rc == 2 and "--plots" in err
