"""What a table's note says reaches every output: a study that did not finish was marked only in
the one-collection LaTeX's ``%`` comments, which a paper's PDF does not print (the float now shows
the INCOMPLETE sentence under its legend), and the CSV of a table over collections had no ``note``
column, so the INCOMPLETE sentence, the queries some runs lack and the metrics counted once were
in none of its cells (it now has the one-collection CSV's: the footnote on each table's first line)."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.tracking.store import default_tracking_uri
from tests.synthetic import synthetic_records, write_long_csv, write_unfinished_studies

Cli = Callable[..., tuple[int, str, str]]
EFFECTS = {"base": 0.0, "better": 0.06}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A one-collection study and one over two collections, each with a failed seed run."""
    return write_unfinished_studies(default_tracking_uri(tmp_path_factory.mktemp("store")))


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.slow  # the module's MLflow store: seconds
def test_the_collections_csv_notes_an_unfinished_study(store: str, run_cli: Cli) -> None:
    rc, out, err = run_cli("table", "--experiment", "many", "--tracking-uri", store, "--format", "csv")
    assert rc == 3 and "INCOMPLETE study" in err
    rows = _rows(out)
    assert list(rows[0])[-1] == "note"
    assert rows[0]["note"].startswith("Crossed seeds \u00d7 queries test") and re.search(
        r"INCOMPLETE study: 1 of \d+ seed runs did not finish \(FAILED\)", rows[0]["note"]), rows[0]["note"]
    assert all(r["note"] == "" for r in rows[1:])
    # as on one collection
    one = _rows(run_cli("table", "--experiment", "one", "--tracking-uri", store, "--format", "csv")[1])
    assert "INCOMPLETE study: " in one[0]["note"]


def test_the_collections_csv_notes_missing_queries_and_identical_metrics(tmp_path: Path, run_cli: Cli) -> None:
    one = write_long_csv(tmp_path / "a.csv", synthetic_records(queries=6, effects=EFFECTS, metrics=("map",)))
    two = write_long_csv(tmp_path / "b.csv", synthetic_records(queries=6, effects=EFFECTS, metrics=("map", "mrr")))
    header, *a = one.read_text().splitlines()
    b = two.read_text().splitlines()[1:]
    # on a, mrr equals map (one relevant document a query); on b, one run lacks q005
    rows = [f"{ln},a" for ln in a] + [f"{ln},a".replace(",map,", ",mrr,") for ln in a]
    rows += [f"{ln},b" for ln in b if not (ln.startswith("better,1,") and ln.endswith(",q005"))]
    (tmp_path / "r.csv").write_text("\n".join([f"{header},collection", *rows]) + "\n")
    rc, out, err = run_cli("table", "--from", str(tmp_path / "r.csv"), "--format", "csv")
    assert rc == 0, err
    (note, *others) = [r["note"] for r in _rows(out)]
    assert "b: 1 of 6 queries are missing from some runs and left out: q005 (missing from better" in note, note
    assert "a: MAP = MRR there (equal per-query values in every run" in note, note
    assert not any(others)


@pytest.mark.slow  # the module's MLflow store and pdflatex: seconds
@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
                    reason="no pdflatex or no pdftotext on PATH (texlive-latex-recommended, poppler-utils)")
def test_the_pdf_of_an_unfinished_study_says_so(store: str, tmp_path: Path, run_cli: Cli) -> None:
    rc, tex, _ = run_cli("table", "--experiment", "one", "--tracking-uri", store, "--format", "latex",
                         "--form", "configs")
    assert rc == 3
    (tmp_path / "t.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}", r"\begin{document}",
           r"\input{t}", r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    text = " ".join(subprocess.run(["pdftotext", "doc.pdf", "-"], cwd=tmp_path, check=True, capture_output=True,
                                   text=True, timeout=60).stdout.split())
    # (pdftotext gives the bold words apart, and drops the "fi" ligature of T1 fonts: "\S+" for "finish")
    assert "INCOMPLETE study:" in text, text
    # the command as typed: its backticks no quotes, its -- two hyphens
    assert re.search(r"1 of \d+ seed runs did not \S+ \(FAILED\); this table holds only the \S+ seed runs "
                     r"\(harness run STUDY --resume \S+ it\)\.", text), text
