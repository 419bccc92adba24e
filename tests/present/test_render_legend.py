"""The LaTeX float's caption and one-line legend say what the table holds: where no marker can
appear (one seed and no test; the baseline alone) the legend described daggers anyway, "untested
test, Holm, m = 0" and "crossed test, Holm, m = 0", and a one-seed caption claimed "mean ± SD over 1
seeds" though no cell has an SD."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]


def _float_lines(tex: str) -> tuple[list[str], list[str]]:
    """Each table's caption and legend (the \\footnotesize line)."""
    return (re.findall(r"^\\caption\{(.*)\}$", tex, flags=re.MULTILINE),
            re.findall(r"^\{\\footnotesize (.*)\\par\}$", tex, flags=re.MULTILINE))


@pytest.mark.parametrize("form", ["seeds", "configs", "summary"])
def test_a_one_seed_table_describes_no_markers_and_no_sd(tmp_path: Path, run_cli: Cli, form: str) -> None:
    path = write_long_csv(tmp_path / "one.csv", synthetic_records(queries=8, seeds=(1,)))
    rc, tex, err = run_cli("table", "--from", str(path), "--format", "latex", "--form", form)
    assert rc == 0, err
    captions, legends = _float_lines(tex)
    assert len(captions) == len(legends) == (1 if form == "configs" else 2)
    for caption, legend in zip(captions, legends, strict=True):
        assert "SD over" not in caption and "\\pm" not in caption and "1 seeds" not in caption, caption
        assert "over 1 seed" in caption and "no significance test (one seed)" in caption, caption
        assert "interval" not in caption  # an untested summary has no interval column
        assert legend == "No significance markers: one seed, no test against the baseline base", legend
    # nor does the note (in the source's comments, and the other formats' footnotes)
    assert "over 1 seeds" not in tex and "No SD: one seed" in tex
    md = run_cli("table", "--from", str(path), "--form", form)[1]
    assert "over 1 seeds" not in md and "No SD: one seed has no sample standard deviation" in md


def test_a_table_of_the_baseline_alone_describes_no_markers(tmp_path: Path, run_cli: Cli) -> None:
    path = write_long_csv(tmp_path / "base.csv", synthetic_records(queries=8, effects={"base": 0.0}))
    rc, tex, err = run_cli("table", "--from", str(path), "--format", "latex", "--form", "configs")
    assert rc == 0, err
    (caption,), (legend,) = _float_lines(tex)
    assert legend == "No significance markers: no configuration is compared with the baseline base", legend
    assert caption.endswith("; base only, no comparison") and "0 comparisons" not in caption, caption


def test_a_one_seed_query_test_keeps_its_legend(tmp_path: Path, run_cli: Cli) -> None:
    """--one-seed-test query tests over the queries: markers (stars) and m, but still no SD."""
    path = write_long_csv(tmp_path / "one.csv", synthetic_records(queries=8, seeds=(1,)))
    rc, tex, err = run_cli("table", "--from", str(path), "--format", "latex", "--form", "configs",
                           "--one-seed-test", "query")
    assert rc == 0, err
    (caption,), (legend,) = _float_lines(tex)
    assert caption.startswith("MAP, MRR: mean over 1 seed, no SD; ") and "Holm over 6 comparisons" in caption, caption
    assert legend.startswith("$*$ p \\textless{} 0.05") and legend.endswith(", Holm, m = 6"), legend
