"""The LaTeX ``\\label`` of each table: made from any metric name (one ending in ")" with no "("
made `--format latex` fail with an IndexError), and its own within one document (metrics whose
names differ only in punctuation or case shared one key, so pdflatex warned "multiply defined"
and every \\ref pointed at the last table)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
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


def _compile(folder: Path, floats: list[str]) -> str:
    """pdflatex on a document that \\inputs each float and \\refs each label: its log."""
    refs = [label for tex in floats for label in _labels(tex)]
    for i, tex in enumerate(floats):
        (folder / f"t{i}.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}", r"\begin{document}",
           *(rf"\input{{t{i}}}\clearpage" for i in range(len(floats))),
           *(rf"Table~\ref{{{label}}}." for label in refs), r"\end{document}", ""]
    (folder / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    for _ in range(2):  # the second run resolves the \refs
        proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=folder,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:]
    return (folder / "doc.log").read_text(encoding="latin-1")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex on PATH (texlive-latex-recommended)")
def test_no_two_tables_of_one_document_share_a_label(tmp_path: Path, run_cli: Cli) -> None:
    """a-b, a_b and "A b" all made tab:harness-summary-a-b (and over collections
    tab:harness-collections-seeds-a-b): pdflatex warned "multiply defined"."""
    metrics = ("a-b", "a_b", "A b")
    one = write_long_csv(tmp_path / "one.csv", synthetic_records(queries=6, effects={"base": 0.0, "b": 0.1},
                                                                 metrics=metrics))
    many = tmp_path / "many.csv"
    with one.open() as src, many.open("w") as dst:  # the same runs on two collections
        header, *rows = src.read().splitlines()
        dst.write("\n".join([f"{header},collection", *(f"{r},{c}" for c in ("x", "y") for r in rows)]) + "\n")
    floats = []
    for path, form in ((one, "summary"), (one, "seeds"), (many, "seeds")):
        rc, out, err = run_cli("table", "--from", str(path), "--format", "latex", "--form", form)
        assert rc == 0, err
        labels = _labels(out)
        assert len(labels) == len(set(labels)) == 3, labels
        again = run_cli("table", "--from", str(path), "--format", "latex", "--form", form)[1]
        assert _labels(again) == labels  # the same keys on every run
        floats.append(out)
    log = _compile(tmp_path, floats)
    assert "multiply defined" not in log and "undefined" not in log, log[-3000:]
