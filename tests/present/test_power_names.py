"""`harness power`'s Markdown writes names as the table writes them: a configuration named like HTML
or Markdown emphasis (<b>x</b>, *star*, _u_) is its name, escaped as the table escapes it, never
raw HTML or italics (the names went into the headings and the clamped-components sentence as they
were)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]
NAMES = ("<b>x</b>", "*star*", "_u_")


def test_power_markdown_escapes_names_as_the_table_does(tmp_path: Path, run_cli: Cli) -> None:
    src = write_long_csv(tmp_path / "names.csv", synthetic_records(
        effects={"base": 0.0, NAMES[0]: 0.06, NAMES[1]: 0.0, NAMES[2]: -0.08}, metrics=("map",)))
    rc, table, err = run_cli("table", "--from", str(src))
    assert rc == 0, err
    header = next(line for line in table.splitlines() if line.startswith("| seed |"))
    escaped = [cell.strip() for cell in header.strip("|").split("|")][2:]  # as the table writes them
    assert escaped == ["\\<b\\>x\\</b\\>", "\\*star\\*", "\\_u\\_"]

    rc, out, err = run_cli("power", "--from", str(src), "--seeds", "3")
    assert rc == 0, err
    heads = [line.split("**")[1] for line in out.splitlines() if line.startswith("**") and " vs base, " in line]
    assert heads == [f"{name} vs base, MAP" for name in escaped]
    clamped = next(line for line in out.splitlines() if line.startswith("Negative variance estimates"))
    assert "seed for \\*star\\* on MAP" in clamped and "seed for \\_u\\_ on MAP" in clamped
    for name in NAMES:  # nowhere raw
        assert f" {name} " not in out and f"*{name}" not in out and f"({name}" not in out
    assert "<b>" not in out.replace("\\<b\\>", "")
