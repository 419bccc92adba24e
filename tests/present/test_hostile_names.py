"""Names from a user's results (configurations, the baseline, metrics, collections) in every
output of `harness table`: a CSV cell never starts a spreadsheet formula, a LaTeX row keeps its
leading ``*`` or ``[`` (compiled by pdflatex), a Markdown footnote carries no raw HTML, and tables of
non-ASCII metrics get distinct LaTeX labels."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.textfile import FORMULA_STARTS

Cli = Callable[..., tuple[int, str, str]]
NAMES = ("<b>base</b>", "*star", "[opt] x", "=cmd()")  # the baseline first


def _csv(path: Path, *, metrics: tuple[str, ...] = ("map",), collections: tuple[str, ...] = ()) -> Path:
    """A long CSV of NAMES over 3 seeds and 6 queries (per collection where given)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["config", "seed", "metric", "value", "query", *(["collection"] if collections else [])])
        for c, coll in enumerate(collections or ("",)):
            for i, name in enumerate(NAMES):
                for seed in (1, 2, 3):
                    for k, metric in enumerate(metrics):
                        w.writerows([name, seed, metric, round(0.3 + 0.04 * i + 0.01 * ((seed * q + c) % 4)
                                                               + 0.02 * k + 0.03 * (q % 3), 4), f"q{q}",
                                     *([coll] if coll else [])] for q in range(6))
    return path


def _table(run_cli: Cli, *argv: str) -> str:
    rc, out, err = run_cli("table", *argv)
    assert rc == 0, err
    return out


def _formula_cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row
            if cell.startswith(FORMULA_STARTS) and not re.fullmatch(r"-?(?:[0-9.e+-]+|inf)", cell)]


def test_csv_cells_never_start_a_formula(tmp_path: Path, run_cli: Cli) -> None:
    """The metric and measure columns of the one-collection CSV, and the title, collection, row and
    column of the collections CSV, were written raw."""
    one = _table(run_cli, "--from", str(_csv(tmp_path / "one.csv", metrics=("=HYPERLINK(1)",))),
                 "--format", "csv", "--form", "configs")
    assert _formula_cells(one) == [] and "'=HYPERLINK(1)" in one and "'=cmd()" in one
    many = _table(run_cli, "--from", str(_csv(tmp_path / "many.csv", metrics=("@SUM(1)",),
                                              collections=("=c1", "+c2"))), "--format", "csv")
    assert _formula_cells(many) == []
    rows = list(csv.DictReader(io.StringIO(many)))
    assert {r["collection"] for r in rows} >= {"'=c1", "'+c2"} and {r["metric"] for r in rows} == {"'@SUM(1)"}
    assert any(r["row"] == "'=cmd()" for r in rows) and all(not r["table"].startswith("@") for r in rows)


def test_the_markdown_footnote_carries_no_raw_html(tmp_path: Path, run_cli: Cli) -> None:
    md = _table(run_cli, "--from", str(_csv(tmp_path / "r.csv")), "--form", "summary")
    assert "<b>" not in md and "</b>" not in md
    assert "the baseline \\<b\\>base\\</b\\>" in md and "p < 0.05" in md  # a comparison stays as it is


def test_latex_labels_of_non_ascii_metrics_differ(tmp_path: Path, run_cli: Cli) -> None:
    tex = _table(run_cli, "--from", str(_csv(tmp_path / "r.csv", metrics=("\u7cbe\u5ea6", "\u53ec\u56de"))),
                 "--format", "latex", "--form", "summary")
    labels = re.findall(r"\\label\{([^}]*)\}", tex)
    assert len(labels) == 2 and len(set(labels)) == 2 and all(re.fullmatch(r"tab:harness-summary-[0-9a-f]{8}", x)
                                                               for x in labels), labels
    many = _table(run_cli, "--from", str(_csv(tmp_path / "m.csv", metrics=("\u7cbe\u5ea6",), collections=("a", "b"))),
                  "--format", "latex")
    assert re.search(r"\\label\{tab:harness-collections-[a-z]+-[0-9a-f]{8}\}", many), many[:600]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
                    reason="no pdflatex or no pdftotext on PATH (texlive-latex-recommended, poppler-utils)")
def test_latex_rows_keep_a_leading_star_or_bracket(tmp_path: Path, run_cli: Cli) -> None:
    """After \\\\ a row starting with * was read as \\\\*, the star form, and lost its *; one starting
    with [ as \\\\[length]. Every form, one collection and several, compiles with every name whole."""
    one, many = _csv(tmp_path / "one.csv"), _csv(tmp_path / "many.csv", collections=("a", "b"))
    floats = [_table(run_cli, "--from", str(one), "--format", "latex", "--form", form)
              for form in ("seeds", "configs", "summary")]
    floats.append(_table(run_cli, "--from", str(many), "--format", "latex"))
    for i, tex in enumerate(floats):
        (tmp_path / f"t{i}.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
           r"\begin{document}", *(rf"\input{{t{i}}}\clearpage" for i in range(len(floats))), r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    pages = subprocess.run(["pdftotext", "-layout", "doc.pdf", "-"], cwd=tmp_path, check=True,
                           capture_output=True, text=True, timeout=60).stdout.split("\f")
    for page in pages[:len(floats)]:  # seeds form: names head the columns; others: they start rows
        assert all(name in " ".join(page.split()) for name in NAMES), page
