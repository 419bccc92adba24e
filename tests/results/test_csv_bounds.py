"""A long results CSV costs memory and work in proportion to its size, whatever it holds: the runs
of a file whose runs each have queries of their own (a truncated or mixed-up export) are named
once, not once per query they lack."""

from __future__ import annotations

import csv
import re
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import DataError
from harness.present.table import dropped_note
from harness.results.longcsv import read_frame_collections, read_long_collections, read_long_csv


def _own_queries_csv(path: Path, seeds: int, own: int) -> Path:
    """Configurations a and b, ``seeds`` seeds, MAP per query: queries s0 and s1 every run has, and
    ``own`` queries of each run's own (which every other run lacks)."""
    lines = ["config,seed,metric,value,query"]
    for config in "ab":
        for seed in range(seeds):
            lines += [f"{config},{seed},map,0.5,s0", f"{config},{seed},map,0.5,s1"]
            lines += [f"{config},{seed},map,0.25,{config}{seed}x{k}" for k in range(own)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("seeds", [200, pytest.param(400, marks=pytest.mark.slow)])
def test_queries_missing_from_most_runs_cost_the_file_s_size(tmp_path: Path, seeds: int) -> None:
    # 50 queries of each run's own, each missing from every other run: naming every run that lacks each one
    # took 0.7 GB for the 0.45 MB file of 200 seeds, 2.7 GB for the 0.9 MB one of 400
    path = _own_queries_csv(tmp_path / "own.csv", seeds=seeds, own=50)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        results = read_long_csv(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * size, f"{peak / 2**20:.0f} MiB for a {size / 2**20:.2f} MiB file"
    assert results.qids == ("s0", "s1") and len(results.dropped) == 2 * seeds * 50
    last = seeds - 1
    lacking = results.dropped[f"b{last}x49"]
    assert len(lacking) == 2 * seeds - 1 and lacking[:2] == ("a seed 0 (map)", "a seed 1 (map)")
    assert f"b seed {last} (map)" not in lacking and lacking[-1] == f"b seed {last - 1} (map)"
    assert dropped_note(results.dropped, len(results.qids)).startswith(
        f"{100 * seeds} of {100 * seeds + 2} queries are missing from some runs and left out: a0x0 (missing from a seed 1 (map), "
        "a seed 2 (map), ...); a0x1 (missing from ")


def test_the_runs_lacking_a_query_read_as_before(tmp_path: Path) -> None:
    """Each dropped query's runs, in the runs' order, as a tuple of them compares, and the footnote
    word for word."""
    path = tmp_path / "few.csv"
    rows = ["config,seed,metric,value,query"]
    missing = {"q3": {("a", "2"), ("b", "1"), ("b", "3")}, "q4": {("b", "2")}}
    for config in "ab":
        for seed in "123":
            rows += [f"{config},{seed},map,0.{seed}{q},q{q}" for q in range(1, 6)
                     if (config, seed) not in missing.get(f"q{q}", ())]
    path.write_text("\n".join(rows) + "\n")
    results = read_long_csv(path)
    assert results.qids == ("q1", "q2", "q5")
    assert results.dropped == {"q3": ("a seed 2 (map)", "b seed 1 (map)", "b seed 3 (map)"),
                               "q4": ("b seed 2 (map)",)}
    assert list(results.dropped["q3"]) == ["a seed 2 (map)", "b seed 1 (map)", "b seed 3 (map)"]
    assert results.dropped["q3"][1] == "b seed 1 (map)" and results.dropped["q3"][-1] == "b seed 3 (map)"
    assert dropped_note(results.dropped, len(results.qids)) == (
        "2 of 5 queries are missing from some runs and left out: q3 (missing from a seed 2 (map), b seed 1 "
        "(map), ...); q4 (missing from b seed 2 (map)). Every mean and test here is over the 3 queries every "
        "run has.")


@pytest.mark.parametrize("command", ["table", "power"])
@pytest.mark.parametrize("seed", ["1" * 5000, "0" * 5000 + "1", "-" + "7" * 4400])
def test_a_seed_of_thousands_of_digits_is_refused_in_one_line(tmp_path: Path, run_cli, command: str,
                                                               seed: str) -> None:
    # Python reads no integer of more than 4300 digits: seed 1 written so was a ValueError's traceback
    path = tmp_path / "long_seed.csv"
    rows = [f"{c},{s},map,0.{i}{q},q{q}" for s in ("1", "2", seed) for i, c in enumerate("ab", 1) for q in (1, 2, 3)]
    path.write_text("config,seed,metric,value,query\n" + "\n".join(rows) + "\n")
    rc, out, err = run_cli(command, "--from", str(path))
    digits = len(seed.lstrip("-"))
    assert rc == 2 and not out, (rc, out)
    assert err.startswith(f"harness: error: {path}:14: seed '") and err.count("\n") == 1, err
    assert f"' has {digits} digits; a seed has at most 100" in err and len(err) < 300, err


def test_a_seed_of_a_hundred_digits_is_a_number(tmp_path: Path) -> None:
    """The longest seed taken, ordered as a number, and the same seed zero-padded recognised as it."""
    big = "9" * 100
    rows = [f"{c},{s},map,0.{i}" for i, s in enumerate((big, "2")) for c in "ab"]
    path = tmp_path / "seeds.csv"
    path.write_text("config,seed,metric,value\n" + "\n".join(rows) + "\n")
    assert read_long_csv(path).seeds == ("2", big)
    path.write_text(path.read_text() + f"a,{'0' * 99}2,map,0.5\n")
    with pytest.raises(DataError, match=rf"^{path}:6: seed '0+2' is seed '2' \({path}:4\) written otherwise"):
        read_long_csv(path)


# (column, cell, what the message says): a name that a table would print unseen, as a space or as a
# terminal's command; a NUL, which no file name or MLflow tag takes
CONTROLS = [("config", "b\0x", "a NUL character at position 1"),
            ("seed", "2\x01", "a control character (U+0001) at position 1"),
            ("metric", "m\tap", "a control character (U+0009) at position 1"),
            ("query", "q\x1b[31m", "a control character (U+001B) at position 1"),
            ("collection", "c\x7f", "a control character (U+007F) at position 1"),
            ("collection", "\x9bc", "a control character (U+009B) at position 0")]


def _table_with(column: str, cell: str) -> tuple[list[str], list[list[str]]]:
    """A long results table over collection c1 whose fourth record has ``cell`` in ``column``."""
    header = ["config", "seed", "metric", "value", "query", "collection"]
    rows = [[c, s, "map", f"0.{i}{q}", f"q{q}", "c1"] for s in ("1", "2") for i, c in enumerate("ab", 1)
            for q in (1, 2)]
    rows[2][header.index(column)] = cell
    return header, rows


@pytest.mark.parametrize(("column", "cell", "what"), CONTROLS,
                         ids=["config-NUL", "seed-SOH", "metric-tab", "query-ESC", "collection-DEL", "collection-CSI"])
def test_a_control_character_in_a_name_is_refused_naming_file_line_and_column(
        tmp_path: Path, run_cli, column: str, cell: str, what: str) -> None:
    header, rows = _table_with(column, cell)
    path = tmp_path / "controls.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *rows])
    with pytest.raises(DataError) as caught:
        read_long_collections(path)
    assert str(caught.value) == f"{path}:4: {column} {cell.strip()!r} holds {what}; a name is printable text"
    rc, out, err = run_cli("table", "--from", str(path))
    assert rc == 2 and not out and err == f"harness: error: {caught.value}\n"
    frame = pd.DataFrame(rows, columns=header)
    with pytest.raises(DataError, match=rf"^DataFrame row 2: {column} .* holds {re.escape(what)}"):
        read_frame_collections(frame)


def test_a_quoted_line_break_and_an_edge_tab_in_names(tmp_path: Path) -> None:
    """A quoted line break is refused where its record starts; a tab at a cell's end is stripped
    with the spaces, as it always was."""
    header, rows = _table_with("config", "b\nx")
    path = tmp_path / "breaks.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *rows])
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:4: a quoted field runs past the end of its line"):
        read_long_collections(path)
    header, rows = _table_with("config", "\tb\t")
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *rows])
    assert read_long_collections(path)["c1"].configs == ("a", "b")


def test_a_dataframe_integer_past_python_s_digit_limit_is_refused_naming_its_row() -> None:
    """The API's DataFrame reader wrote each cell with str(), which raises past 4300 digits (a
    ValueError traceback): such a seed or value is refused naming its row and column."""
    frame = pd.DataFrame({"config": ["a", "b"], "seed": [1, 10 ** 5000], "metric": ["map", "map"],
                          "value": [0.5, 0.4]})
    with pytest.raises(DataError, match=r"^DataFrame row 1: seed is an integer of 16610 bits"):
        read_frame_collections(frame)
