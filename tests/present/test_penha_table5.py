"""Penha & Hauff (2020) Table 5: the per-run MAP of 8 scoring functions x 5 runs through
`harness table --from` reproduces the paper's AVG and SD rows (SD is the sample SD, ddof = 1)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
COLUMNS = ["random", "#turns", "#Uwords", "#Rwords", "sigma_SM", "sigma_BM25", "BERT_pred", "BERT_loss"]
PAPER = {  # AVG and SD rows as printed in Table 5
    "msdialog": {"AVG": [0.7098, 0.7157, 0.7138, 0.7097, 0.7128, 0.7084, 0.7241, 0.7240],
                 "SD": [0.0056, 0.0086, 0.0086, 0.0106, 0.0095, 0.0101, 0.0079, 0.0055]},
    "mantis": {"AVG": [0.7131, 0.7135, 0.7103, 0.7107, 0.7114, 0.7126, 0.7222, 0.7196],
               "SD": [0.0090, 0.0085, 0.0102, 0.0111, 0.0084, 0.0079, 0.0088, 0.0088]},
}


def _markdown_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| seed"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("dataset", ["msdialog", "mantis"])
def test_avg_and_sd_rows_reproduce_the_paper(dataset: str, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, err = run_cli("table", "--from", str(FIXTURES / f"penha_table5_{dataset}.csv"), "--form", "seeds")
    assert rc == 0, err
    rows = _markdown_rows(out)
    header = [c.strip() for c in out.splitlines()[2].strip("|").split("|")]
    assert header == ["seed", *(c.replace("_", "\\_") for c in COLUMNS)]
    for row in ("AVG", "SD"):
        shown = [float(c.strip("*").rstrip("\u2020\u2021").strip("*")) for c in rows[row]]
        assert shown == PAPER[dataset][row], row
    assert "Only per-run values are available" in out


def test_paper_sd_is_the_sample_sd() -> None:
    """The population SD (ddof = 0) would not reproduce the SD row; the sample SD does."""
    values = np.zeros((5, 8))
    with (FIXTURES / "penha_table5_msdialog.csv").open() as fh:
        for r in csv.DictReader(fh):
            values[int(r["seed"]) - 1, COLUMNS.index(r["config"])] = float(r["value"])
    assert np.round(values.std(axis=0, ddof=1), 4).tolist() == PAPER["msdialog"]["SD"]
    assert np.round(values.std(axis=0, ddof=0), 4).tolist() != PAPER["msdialog"]["SD"]


def test_bold_and_markers_on_the_avg_row(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    # Each configuration tested on its own, as in the paper's table (no correction).
    rc, out, _ = run_cli("table", "--from", str(FIXTURES / "penha_table5_msdialog.csv"), "--correction", "none",
                         "--form", "seeds")
    assert rc == 0
    rows = _markdown_rows(out)
    assert rows["AVG"][6] == "**0.7241**\u2021"   # BERT_pred: best and p < 0.01 across seeds
    assert rows["AVG"][7] == "0.7240\u2021"
    assert rows["AVG"][1] == "0.7157\u2020"       # #turns: p = 0.0145
    assert rows["1"][6] == "**0.7272**" and not any("*" in c for c in rows["SD"])


def test_csv_output_carries_the_numbers(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = run_cli("table", "--from", str(FIXTURES / "penha_table5_msdialog.csv"), "--form", "seeds", "--format", "csv",
                         "--correction", "none")
    assert rc == 0
    cells = {(r["row"], r["column"]): r for r in csv.DictReader(io.StringIO(out))}
    assert round(float(cells[("AVG", "BERT_pred")]["value"]), 4) == 0.7241
    assert float(cells[("AVG", "BERT_pred")]["p_value"]) < 0.01
    assert cells[("AVG", "BERT_pred")]["marker"] == "\u2021" and cells[("AVG", "random")]["p_value"] == ""
    turns = cells[("AVG", "#turns")]
    assert turns["comparisons"] == "7" and turns["direction"] == "better" and turns["correction"] == "none"
    d = np.array([0.7220 - 0.7142, 0.7060 - 0.7044, 0.7215 - 0.7126, 0.7065 - 0.7031, 0.7225 - 0.7148])
    assert float(turns["mean_diff"]) == pytest.approx(d.mean())
    assert float(turns["d_z"]) == pytest.approx(d.mean() / d.std(ddof=1))
    half = 2.7764451051977987 * d.std(ddof=1) / np.sqrt(5)  # t_{0.975, 4}
    assert (float(turns["ci_low"]), float(turns["ci_high"])) == pytest.approx((d.mean() - half, d.mean() + half))
