"""The tables of the shipped multi-collection studies (search_spaces/*.yaml with ``collections``):
the whole table their report logs, built from synthetic results with each study's own
configuration names, collection names, seeds and every metric a trial logs, compiles with pdflatex
as one float (the configs form; the per-seed form beside it), and the PDF shows every collection
and configuration name as the study file spells it (an underscore as in ``bert_pred`` is text,
not a subscript)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.analysis import CollectionsStudy
from harness.metrics.measures import METRIC_KEYS
from harness.present.collections_significance import CollectionsSignificanceTable
from harness.results.stored import StudyResults
from harness.study.spec import StudySpec, load_spec
from tests.synthetic import synthetic_records

SEARCH_SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
# pdftotext gives the T1 font's ligatures as their slots 27-31 (cranfield's "fi" as 0x1c).
LIGATURES = str.maketrans({"\x1b": "ff", "\x1c": "fi", "\x1d": "fl", "\x1e": "ffi", "\x1f": "ffl"})


def _shipped() -> list[Path]:
    return sorted(p for p in SEARCH_SPACES.glob("*.yaml") if load_spec(p).collections)


def test_the_shipped_multi_collection_studies_are_found() -> None:
    # The studies docs/study-file.md lists over several collections; a new one joins the test below.
    assert {p.name for p in _shipped()} >= {"quickstart_collections.yaml", "penha2020_table5.yaml",
                                            "wsls2021_table2.yaml"}


def _tables(spec: StudySpec) -> tuple[str, str]:
    """The study's LaTeX tables as its report logs them (tables/collections-configs.tex and
    tables/collections-seeds.tex), from synthetic results shaped as the study's."""
    names = [spec.baseline.name, *dict.fromkeys(nc.name for nc in spec.configs)]
    collections = {}
    for i, collection in enumerate(spec.collections):
        effects = {name: 0.03 * (j % 3) - 0.02 * (j % 2) for j, name in enumerate(names)}
        records = synthetic_records(queries=30 + 10 * i, seeds=spec.seeds, effects=effects, metrics=METRIC_KEYS)
        collections[collection] = StudyResults.build(records, baseline=spec.baseline.name, source=collection)
    analysis = CollectionsStudy(collections=collections).analyse()
    return tuple(CollectionsSignificanceTable.build(analysis, form).render("latex")  # type: ignore[return-value]
                 for form in ("configs", "seeds"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
                    reason="no pdflatex or no pdftotext on PATH (texlive-latex-recommended, poppler-utils)")
@pytest.mark.parametrize("study", [p.name for p in _shipped()])
def test_the_shipped_study_s_table_compiles_as_one_float(tmp_path: Path, study: str) -> None:
    spec = load_spec(SEARCH_SPACES / study)
    configs, seeds = _tables(spec)
    assert configs.count(r"\begin{table}") == 1 and configs.count(r"\caption{") == 1
    (tmp_path / "configs.tex").write_text(configs, encoding="utf-8")
    (tmp_path / "seeds.tex").write_text(seeds, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
           r"\begin{document}", r"\input{configs}", r"\clearpage", r"\input{seeds}", r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    text = subprocess.run(["pdftotext", "-layout", "doc.pdf", "-"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=True).stdout
    first_page = text.split("\f")[0].translate(LIGATURES)
    for name in (*spec.collections, spec.baseline.name, *(nc.name for nc in spec.configs)):
        assert name in first_page, name
