"""The LaTeX ``\\label`` of each table: made from any metric name (one ending in ")" with no "("
made `--format latex` fail with an IndexError), and its own within one document (metrics whose
names differ only in punctuation or case shared one key, so pdflatex warned "multiply defined"
and every \\ref pointed at the last table)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.present.render import latex_label
from harness.present.table import build_tables
from harness.results.stored import StudyResults
from harness.stats.significance import AnalysisOptions, analyse
from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]
# Names whose last "(" or ")" is no phase's: the title's end is not " (confirmatory)".
ODD = ("score)", ")", "(", "f(x)", "a (b", "((x))", ") (", "x (explor", "(confirmatory)")


def _labels(tex: str) -> list[str]:
    return re.findall(r"\\label\{([^}]*)\}", tex)


@pytest.mark.parametrize("form", ["seeds", "configs", "summary"])
def test_metrics_named_with_parentheses_get_labels(tmp_path: Path, run_cli: Cli, form: str) -> None:
    # the configs form's one title joins the names: "score), n)" has a ")" at its end and no "("
    metrics = ("score)", "n)") if form == "configs" else ODD
    path = write_long_csv(tmp_path / "odd.csv", synthetic_records(queries=6, effects={"base": 0.0, "better": 0.06},
                                                                   metrics=metrics))
    rc, out, err = run_cli("table", "--from", str(path), "--format", "latex", "--form", form)
    assert rc == 0, err
    labels = _labels(out)
    assert len(labels) == (1 if form == "configs" else len(ODD)) == len(set(labels)), labels
    assert all(re.fullmatch(rf"tab:harness-{form}(-[a-z0-9]+)+", x) for x in labels), labels
    # nothing of a title that names no phase is read as one
    assert labels[0] == (f"tab:harness-{form}-score" if form != "configs" else "tab:harness-configs-score-n"), labels
    # a phase is still read from the title's end, after a name of any shape
    results = dataclasses.replace(StudyResults.build(synthetic_records(queries=6, effects={"base": 0.0, "b": 0.1},
                                                                       metrics=("score)",))), phase="exploratory")
    (table,) = build_tables(analyse(results, AnalysisOptions()), form)
    assert latex_label(table) == f"tab:harness-{form}-score-exploratory", table.title
