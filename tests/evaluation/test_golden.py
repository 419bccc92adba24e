"""Markdown and LaTeX renderings against golden files; the LaTeX compiles where pdflatex exists.

Regenerate after an intended change: HARNESS_UPDATE_GOLDEN=1 pytest tests/evaluation/test_golden.py
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

from harness.evaluation.table import library_versions

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
PENHA = str(HERE / "fixtures" / "penha_table5_msdialog.csv")
ESCAPING = str(HERE / "fixtures" / "escaping.csv")

CASES = {
    "penha_msdialog_seeds.md": ("--from", PENHA),
    "penha_msdialog_seeds.tex": ("--from", PENHA, "--format", "latex"),
    "escaping_configs_holm.md": ("--from", ESCAPING, "--form", "configs", "--correction", "holm"),
    "escaping_configs_holm.tex": ("--from", ESCAPING, "--form", "configs", "--correction", "holm",
                                  "--format", "latex"),
    "escaping_per_seed.tex": ("--from", ESCAPING, "--test", "per-seed", "--format", "latex",
                              "--correction", "bh"),
    "escaping_configs_per_seed.md": ("--from", ESCAPING, "--form", "configs", "--test", "per-seed"),
}


def _render(run_cli: Callable[..., tuple[int, str, str]], *argv: str) -> str:
    rc, out, err = run_cli("table", *argv)
    assert rc == 0, err
    return out.replace(library_versions(), "@VERSIONS@")


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str, run_cli: Callable[..., tuple[int, str, str]],
                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.evaluation.table.library_versions", lambda: "@VERSIONS@")
    text = _render(run_cli, *CASES[name])
    path = GOLDEN / name
    if os.environ.get("HARNESS_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_latex_has_no_stray_lines() -> None:
    """Each tabular: booktabs rules only, no vertical rules, no blank or empty rows inside."""
    for path in GOLDEN.glob("*.tex"):
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            body = [ln for ln in block.strip("\n").splitlines() if not ln.startswith("%")]
            assert body[0].startswith(r"\begin{tabular}{l") and body[-1] == r"\end{tabular}"
            assert "|" not in body[0] and r"\hline" not in block and all(ln.strip() for ln in body)
            assert body[1] == r"\toprule" and body[-2] == r"\bottomrule"
            columns = body[0][len(r"\begin{tabular}{"):-1]
            assert set(columns[1:]) == {"r"}
            rows = [ln for ln in body[2:-2] if ln != r"\midrule"]
            assert all(ln.endswith(r" \\") and ln.count(" & ") == len(columns) - 1 for ln in rows)


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX engine (pdflatex) on PATH")
def test_latex_compiles(tmp_path: Path) -> None:
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
           r"\begin{document}"]
    for path in sorted(GOLDEN.glob("*.tex")):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        doc += [r"\begin{table}\centering", rf"\input{{{path.stem}}}", r"\end{table}"]
    (tmp_path / "doc.tex").write_text("\n".join([*doc, r"\end{document}", ""]), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]


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
