"""The first comment line of a LaTeX table says what compiles it, and says it truly: pdflatex
with the packages it names sets the table, and where it names characters pdflatex cannot set,
pdflatex stops. It took every character up to U+017F for settable (Ħ, ĸ, ŉ and ſ stop pdflatex)
and every one beyond for not (€, — and “ ” are set), said booktabs alone sets all but < and > (ð,
« need T1 fonts) and printed a name's "|" as an em dash under booktabs alone. Each character is
compiled by the real pdflatex here, in a configuration's name (the check of what is set is
pdflatex's own: pdftotext reads no letter beyond ASCII from the bitmap fonts it may use)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.present.render import latex
from harness.present.table import Table, build_tables
from harness.results.stored import StudyResults
from harness.stats.significance import AnalysisOptions, analyse
from tests.synthetic import synthetic_records

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
    reason="no pdflatex or no pdftotext on PATH (texlive-latex-recommended, poppler-utils)")]

# U+0126 Ħ, U+0138 ĸ, U+0149 ŉ, U+017F ſ: Latin Extended-A pdflatex cannot set; € — “ ” ‚ …: beyond
# it, set; é ß: Latin-1, set by either encoding; ð « Ą Ŋ ‹: T1 only; α 精: neither.
CHARACTERS = "\u0126\u0138\u0149\u017f\u20ac\u2014\u201c\u201d\u201a\u2026\u00e9\u00df\u00f0\u00ab\u0104\u014a\u2039\u03b1\u7cbe"


@pytest.fixture(scope="module")
def table() -> Table:
    results = StudyResults.build(synthetic_records(queries=6, effects={"base": 0.0, "better": 0.06},
                                                   metrics=("map",)))
    (one,) = build_tables(analyse(results, AnalysisOptions()), "configs")
    return one


def _named(table: Table, name: str) -> str:
    """The table's LaTeX with its second configuration named ``name``."""
    rows = (table.rows[0], dataclasses.replace(table.rows[1], label=name))
    return latex(dataclasses.replace(table, rows=rows))


def _compiles(folder: Path, tex: str, *packages: str) -> tuple[bool, str]:
    """Whether pdflatex sets ``tex`` in a document loading ``packages`` (without an error, and
    without a glyph its font lacks: \\tracinglostchars), and the PDF's text."""
    folder.mkdir()
    (folder / "t.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", *packages, r"\tracinglostchars=2", r"\begin{document}", r"\input{t}",
           r"\end{document}", ""]
    (folder / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=folder,
                          capture_output=True, text=True, timeout=120, check=False)
    log = (folder / "doc.log").read_text(encoding="latin-1")
    if proc.returncode != 0 or "Missing character" in log:
        return False, log[-1500:]
    return True, subprocess.run(["pdftotext", "-layout", "doc.pdf", "-"], cwd=folder, check=True,
                                capture_output=True, text=True, timeout=60).stdout


@pytest.mark.parametrize("ch", list(CHARACTERS), ids=[f"U+{ord(c):04X}" for c in CHARACTERS])
def test_the_header_says_whether_pdflatex_sets_a_name(tmp_path: Path, table: Table, ch: str) -> None:
    tex = _named(table, f"x{ch}y")
    header = tex.splitlines()[0]
    flagged = "which pdflatex cannot set" in header
    t1_named = f"fontenc}} for <, > and {ch}" in header
    with_t1, out = _compiles(tmp_path / "t1", tex, r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}")
    assert with_t1 != flagged, (header, out)
    if with_t1:
        alone, out = _compiles(tmp_path / "ot1", tex, r"\usepackage{booktabs}")
        assert alone != t1_named, (header, out)
    if flagged:
        assert f"holds {ch}, which" in header, header


def test_a_bar_in_a_name_is_a_bar_under_booktabs_alone(tmp_path: Path, table: Table) -> None:
    tex = _named(table, "a|b")
    assert tex.splitlines()[0].endswith(r"\usepackage{booktabs} (and \usepackage[T1]{fontenc} for < and >)")
    ok, out = _compiles(tmp_path / "doc", tex, r"\usepackage{booktabs}")
    assert ok and "a|b" in out and "a\u2014b" not in out, out
