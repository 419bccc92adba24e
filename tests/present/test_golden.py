"""Markdown and LaTeX renderings against golden files; the LaTeX compiles where pdflatex exists, and
the PDF's text (pdftotext) holds every table's caption and legend.

Regenerate after an intended change: HARNESS_UPDATE_GOLDEN=1 pytest tests/present/test_golden.py
(library versions in the footnote are replaced by @VERSIONS@ before rendering, so the LaTeX comment
lines wrap the same whatever the installed versions are).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.present.table import library_versions

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
PENHA = str(HERE / "fixtures" / "penha_table5_msdialog.csv")
ESCAPING = str(HERE / "fixtures" / "escaping.csv")

CASES = {
    "penha_msdialog_seeds.md": ("--from", PENHA, "--form", "seeds"),
    "penha_msdialog_seeds.tex": ("--from", PENHA, "--form", "seeds", "--format", "latex"),
    "penha_msdialog_auto.md": ("--from", PENHA),  # 8 configurations: the summary form
    "escaping_configs_holm.md": ("--from", ESCAPING, "--form", "configs", "--correction", "holm"),
    "escaping_configs_holm.tex": ("--from", ESCAPING, "--form", "configs", "--correction", "holm",
                                  "--format", "latex"),
    "escaping_per_seed.tex": ("--from", ESCAPING, "--test", "per-seed", "--format", "latex",
                              "--correction", "bh"),
    "escaping_configs_per_seed.md": ("--from", ESCAPING, "--form", "configs", "--test", "per-seed"),
    "escaping_summary.md": ("--from", ESCAPING, "--form", "summary"),
    "escaping_summary.tex": ("--from", ESCAPING, "--form", "summary", "--format", "latex"),
    "escaping_summary_per_seed.tex": ("--from", ESCAPING, "--form", "summary", "--test", "per-seed",
                                      "--format", "latex"),
}


def _render(run_cli: Callable[..., tuple[int, str, str]], *argv: str) -> str:
    rc, out, err = run_cli("table", *argv)
    assert rc == 0, err
    return out.replace(library_versions(), "@VERSIONS@")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str, run_cli: Callable[..., tuple[int, str, str]],
                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.present.table.library_versions", lambda: "@VERSIONS@")
    text = _render(run_cli, *CASES[name])
    path = GOLDEN / name
    if os.environ.get("HARNESS_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def _tables(text: str) -> list[list[str]]:
    """Each table's lines: a header comment, then one ``table`` float."""
    return [block.strip("\n").splitlines() for block in text.split("\n\n") if block.strip()]


def test_latex_has_no_stray_lines() -> None:
    """Each table: a header comment naming the packages, a float with caption and label, a booktabs
    tabular (no vertical rules, no blank or empty rows), the one-line legend after it in the float,
    then the full note as a comment block."""
    for path in GOLDEN.glob("*.tex"):
        for block in _tables(path.read_text(encoding="utf-8")):
            end_float = block.index(r"\end{table}")
            lines, note = block[:end_float + 1], block[end_float + 1:]
            assert note[0] == "% Note:" and all(ln.startswith("% ") for ln in note[1:])
            assert lines[0].startswith("% harness significance table: ") and r"\usepackage{booktabs}" in lines[0]
            assert lines[1:3] == [r"\begin{table}[tbp]", r"\centering"] and lines[-1] == r"\end{table}"
            assert lines[3].startswith(r"\caption{") and lines[4].startswith(r"\label{tab:harness-")
            assert not any(ln.startswith("%") for ln in lines[1:])
            start, end = 5, lines.index(r"\end{tabular}")
            body = lines[start:end + 1]
            assert body[0].startswith(r"\begin{tabular}{l") and "|" not in body[0]
            assert r"\hline" not in "\n".join(lines) and all(ln.strip() for ln in lines)
            assert body[1] == r"\toprule" and body[-2] == r"\bottomrule"
            columns = body[0][len(r"\begin{tabular}{"):-1]
            assert set(columns[1:]) == {"r"}
            rows = [ln for ln in body[2:-2] if ln != r"\midrule"]
            assert all(ln.endswith(r" \\") and ln.count(" & ") == len(columns) - 1 for ln in rows)
            assert lines[end + 1] == r"\par\smallskip" and lines[end + 2].startswith(r"{\footnotesize ")
            assert lines[end + 2].endswith(r"\par}") and lines[end + 3:] == [r"\end{table}"]


def _pdf_text(tmp_path: Path, tex: str) -> str:
    """``tex`` (harness table's LaTeX) in a minimal document with the packages its header names,
    through pdflatex, then pdftotext: the PDF's words on one line."""
    (tmp_path / "tables.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
           r"\begin{document}", r"\listoftables", r"\input{tables}", r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    for _ in range(2):  # the second run fills the list of tables from the .aux
        proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:]
    assert "multiply defined" not in (tmp_path / "doc.log").read_text(errors="replace")
    proc = subprocess.run(["pdftotext", "-layout", "doc.pdf", "-"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=True)
    return " ".join(proc.stdout.split())


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX engine (pdflatex) on PATH")
def test_latex_compiles(tmp_path: Path) -> None:
    tex = "\n".join(path.read_text(encoding="utf-8") for path in sorted(GOLDEN.glob("*.tex")))
    (tmp_path / "tables.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
           r"\begin{document}", r"\input{tables}", r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]


@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
                    reason="no pdflatex or no pdftotext on PATH (texlive-latex-recommended, poppler-utils)")
def test_multi_metric_latex_pdf_names_each_table(run_cli: Callable[..., tuple[int, str, str]],
                                                   tmp_path: Path) -> None:
    """A two-metric export in a PDF: each table's caption (metric, test, correction, family size) is
    in the PDF's text, numbered, once in the list of tables and once over its table, and each legend
    (what the dagger means) is printed under its table, not only in comments."""
    rc, tex, err = run_cli("table", "--from", ESCAPING, "--format", "latex", "--correction", "holm",
                           "--form", "seeds")
    assert rc == 0, err
    text = _pdf_text(tmp_path, tex)
    for number, metric in enumerate(("MAP", "P@1"), start=1):
        caption = (f"Table {number}: {metric}: per seed, mean (AVG) and SD over 3 seeds; crossed test "
                   "against BERT, Holm over 3 comparisons")
        assert text.count(caption) == 1, (caption, text[:600])  # the float's caption
        assert text.count(caption[len(f"Table {number}: "):]) == 2  # and the list of tables' entry
    # (pdftotext drops the "fi" ligature of T1 fonts: "Signi[fi]cantly" is matched from "better")
    assert text.count("† p < 0.05, ‡ p < 0.01 better than the baseline BERT; ↓, ⇓ worse; crossed test, "
                      "Holm, m = 3") == 2
    labels = [ln for ln in tex.splitlines() if ln.startswith(r"\label{")]
    assert labels == [r"\label{tab:harness-seeds-map}", r"\label{tab:harness-seeds-p-1}"]


class _Balance(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack.pop() == tag


def test_html_is_well_formed(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    text = _render(run_cli, "--from", ESCAPING, "--format", "html", "--form", "configs")
    parser = _Balance()
    parser.feed(text)
    assert parser.stack == []
    assert "<th>w. T-LS &amp; 50%</th>" in text and "&plusmn;" in text and "<tfoot>" in text


@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
                    reason="no pdflatex or no pdftotext on PATH (texlive-latex-recommended, poppler-utils)")
def test_a_label_opening_with_a_bracket_compiles(tmp_path: Path) -> None:
    """A configuration named "[ablation] ..." starts a row right after the previous row's \\\\, which
    would read it as \\\\'s optional [length]; in both row-per-configuration forms it prints as named."""
    from harness.analysis import StudyAnalysis
    from harness.results.stored import RunRecord, StudyResults

    records = [RunRecord(config=c, seed=str(s), values={"map": v + s / 100})
               for c, v in (("base", 0.5), ("[ablation] no CL", 0.6)) for s in (1, 2, 3)]
    analysis = StudyAnalysis(results=StudyResults.build(records))
    tex = analysis.table(form="summary").to_latex() + "\n" + analysis.table(form="configs").to_latex()
    assert _pdf_text(tmp_path, tex).count("[ablation] no CL 0.6200") == 2
