"""Names in a long results CSV: one the harness's CSV writers guard against spreadsheet formulas
(textfile.csv_cell: ``=cmd()`` written ``'=cmd()``) reads back as itself, from a file and from a
DataFrame; a line break in a name is refused, whatever the source."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import DataError
from harness.results.longcsv import read_long_collections, read_long_frame
from harness.textfile import csv_cell, csv_text

# names a spreadsheet would run as formulas, names that only look guarded, numbers
NAMES = ["=cmd()", "+1 lr", "-x", "@SUM", "'=quoted", "''=twice", "'plain", "-0.5", "ok", "'", "'-1"]


@pytest.mark.parametrize("name", NAMES)
def test_csv_text_undoes_csv_cell(name: str) -> None:
    assert csv_text(csv_cell(name)) == name
    assert not str(csv_cell(name)).startswith(("=", "+", "@", "-")) or name == "-0.5"


def test_guarded_names_read_back_as_themselves(tmp_path: Path) -> None:
    rows = [(config, seed, "map", 0.25 + 0.01 * i + 0.02 * int(seed), f"q{q}", collection)
            for collection in ("=coll", "plain") for i, config in enumerate(NAMES)
            for seed in ("1", "2") for q in range(3)]
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["config", "seed", "metric", "value", "query", "collection"])
        writer.writerows([csv_cell(c) for c in row] for row in rows)
    assert "\n'=cmd(),1," in path.read_text() and "\n''=quoted,1," in path.read_text()
    collections = read_long_collections(path)
    assert list(collections) == ["=coll", "plain"]
    for results in collections.values():
        assert results.configs == tuple(NAMES) and results.baseline == "=cmd()"
    # the same cells in a DataFrame (pandas.read_csv of the file) read alike
    frame = pd.read_csv(path, dtype=str)
    assert read_long_frame(frame[frame["collection"] == "plain"].drop(columns="collection")).configs == tuple(NAMES)


def test_a_line_break_in_a_name_is_refused_in_a_dataframe() -> None:
    frame = pd.DataFrame({"config": ["a", "b\rc"], "seed": ["1", "1"], "metric": "map", "value": [0.5, 0.6]})
    with pytest.raises(DataError, match=r"^DataFrame row 1: config 'b\\rc' holds a line break"):
        read_long_frame(frame)
