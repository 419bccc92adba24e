"""Output a researcher can paste (issue 40): metrics identical by construction shown and counted
once, one power story, wording in every renderer with a baseline named "baseline", and LaTeX as one
captioned float with a one-line legend, compiled by pdflatex."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.analysis import StudyAnalysis, TableOptions, form_for
from harness.present.html_report import own_mde, power_curve, report_html
from harness.present.power_text import render_power
from harness.present.render import render
from harness.present.report import study_report
from harness.present.table import build_tables
from harness.results.stored import RunRecord, StudyResults
from harness.stats.power import PowerOptions, power_analysis
from harness.stats.significance import AnalysisOptions, analyse


def _records(configs: dict[str, float], *, queries: int = 30, seeds: int = 3,
             same_as_baseline: tuple[str, ...] = ()) -> list[RunRecord]:
    """One relevant document per query: AP = RR = RR@10 (the positive always in the top 10) and
    P@1 = R-Prec, each run's values from its rank of the positive; nDCG@10 differs from them."""
    g = np.random.default_rng(40)
    qids = [f"q{i:02d}" for i in range(queries)]
    hardness = g.uniform(0.0, 1.5, queries)
    base_ranks: dict[int, np.ndarray] = {}
    out = []
    for config, gain in configs.items():
        for s in range(1, seeds + 1):
            if config in same_as_baseline:
                ranks = base_ranks[s]
            else:
                ranks = np.clip(np.round(1 + 4 * hardness - gain + g.normal(0, 0.8, queries)), 1, 10)
                base_ranks.setdefault(s, ranks)
            rr = 1.0 / ranks
            p1 = (ranks == 1).astype(float)
            ndcg = 1.0 / np.log2(ranks + 1)
            per_query = {m: dict(zip(qids, v.tolist(), strict=True)) for m, v in
                         (("map", rr), ("mrr", rr), ("mrr_10", rr), ("p_1", p1), ("rprec", p1),
                          ("ndcg_10", ndcg))}
            out.append(RunRecord(config=config, seed=str(s), per_query=per_query))
    return out


@pytest.fixture(scope="module")
def results() -> StudyResults:
    return StudyResults.build(_records({"baseline": 0.0, "curriculum": 1.2, "smoothing": 0.3}),
                              baseline="baseline")


@pytest.mark.slow
def test_identical_metrics_are_found_from_the_data_and_counted_once(results: StudyResults) -> None:
    merged = analyse(results, AnalysisOptions(family="all"))
    assert merged.metrics == ("map", "p_1", "ndcg_10")
    assert merged.identical == (("map", "mrr", "mrr_10"), ("p_1", "rprec"))
    every = analyse(results, AnalysisOptions(family="all", merge_identical=False))
    assert {c.family_size for c in merged.comparisons} == {3 * 2}
    assert {c.family_size for c in every.comparisons} == {6 * 2}
    # the same test, fewer comparisons to correct for: the shown p-values are never larger
    for c in merged.comparisons:
        assert c.p_adjusted <= every.get(c.config, c.metric).p_adjusted + 1e-12
    assert merged.get("curriculum", "map").result.p_value == every.get("curriculum", "mrr").result.p_value


@pytest.mark.slow
def test_identical_metrics_are_shown_once_with_a_note(results: StudyResults) -> None:
    analysis = StudyAnalysis(results=results, options=TableOptions())
    md = analysis.table(form="configs").to_markdown()
    header = next(line for line in md.splitlines() if line.startswith("| configuration"))
    assert header == "| configuration | MAP = MRR = MRR@10 | P@1 = R-Prec | nDCG@10 |"
    assert ("MAP = MRR = MRR@10; P@1 = R-Prec here: equal per-query values in every run (one relevant "
            "document per query), so each is shown once and counted once in the family") in md
    assert "m = 6 comparisons" in md
    seeds = analysis.table(form="seeds").to_markdown()
    assert [ln for ln in seeds.splitlines() if ln.startswith("**")] == [
        "**MAP = MRR = MRR@10**", "**P@1 = R-Prec**", "**nDCG@10**"]
    # the config runs keep every metric's columns: an identical metric carries its group's test
    outcome = study_report(results, formats=("md",)).outcomes["curriculum"]
    assert outcome.metrics["mrr_10_p"] == outcome.metrics["map_p"]
    assert outcome.markers["rprec"] == outcome.markers["p_1"]


@pytest.mark.slow
def test_the_report_counts_distinct_comparisons(results: StudyResults) -> None:
    page = report_html(study_report(results, formats=("html",)))
    decided = re.search(r"<li>(\d+) of (\d+) comparisons significant", page)
    assert decided is not None and decided.group(2) == "6"  # 3 distinct metrics x 2 candidates
    assert "MAP = MRR = MRR@10; P@1 = R-Prec here" in page


@pytest.mark.slow
def test_a_baseline_named_baseline_is_never_the_baseline_baseline(results: StudyResults) -> None:
    analysis = StudyAnalysis(results=results, options=TableOptions())
    texts = {fmt: analysis.table().render(fmt) for fmt in ("md", "latex", "csv", "html")}
    report = study_report(results, formats=("md", "latex", "csv", "html"))
    texts["report"] = report_html(report)
    texts["report tables"] = "\n".join(report.tables.values())
    texts["power"] = render_power(power_analysis(results), "md")
    for where, text in texts.items():
        assert "baseline baseline" not in text.replace("Baseline baseline", "baseline baseline"), where
        assert not re.search(r"\bholm\b(?! test)", re.sub(r",holm,", ",", text)), where  # Holm, as a name
    assert "against the baseline" in texts["md"] and "Holm correction" in texts["report"]


@pytest.mark.slow
def test_power_dots_lie_on_their_curves_and_the_rule_is_stated(results: StudyResults) -> None:
    report = study_report(results, formats=("html",))
    power = report.power
    assert power is not None
    for comp in power.comparisons:
        curve = dict(power_curve(power, comp.config, comp.metric))
        assert own_mde(power, comp.config, comp.metric) == curve[power.seeds]
    # at the page's level, which is not power/power.md's where the table's family is larger
    assert "dots: this study&#x27;s 3 seeds at this level (power/power.md and the terminal give each metric&#x27;s" in report_html(report)


@pytest.mark.slow
def test_a_degenerate_comparison_is_not_estimable_in_words() -> None:
    """A configuration that scores as the baseline in every run: no variance, so no MDE; never
    "MDE 0.0000" or "df nan"."""
    results = StudyResults.build(_records({"baseline": 0.0, "copy": 0.0, "curriculum": 1.2},
                                          same_as_baseline=("copy",)), baseline="baseline")
    power = power_analysis(results, PowerOptions(metrics=("map",)))
    text = render_power(power, "md")
    assert ("**copy vs baseline, MAP**: observed difference +0.0000 (crossed test p = 1); MDE not "
            "estimable: the configuration's per-query values equal the baseline's in every run, so the "
            "differences have no variance.") in text
    assert "nan" not in text and "| 0.0000 |" not in text
    page = report_html(study_report(results, formats=("html",)))
    assert "copy on MAP = MRR = MRR@10: not estimable (the configuration&#x27;s per-query values" in page


def _latex(results: StudyResults) -> str:
    """What `harness table --format latex` prints by default (harness.analysis.form_for)."""
    form = form_for("auto", "latex", len(results.configs))
    return StudyAnalysis(results=results, options=TableOptions()).table(form=form).to_latex()


_LATEX = shutil.which("pdflatex") is None or shutil.which("pdftotext") is None


def test_latex_is_one_float_with_a_one_line_legend(results: StudyResults) -> None:
    tex = _latex(results)
    assert tex.count(r"\begin{table}") == 1 and r"\toprule" in tex and r"\bottomrule" in tex
    body, _, comments = tex.partition(r"\end{table}")
    assert "Effect size" not in body and "numpy" not in body  # the full note stays out of the float
    legend = [ln for ln in body.splitlines() if ln.startswith(r"{\footnotesize")]
    assert legend == [(r"{\footnotesize $\dagger$ p \textless{} 0.05, $\ddagger$ p \textless{} 0.01 better "
                       r"than the baseline; $\downarrow$, $\Downarrow$ worse; crossed test, Holm, m = 6\par}")]
    assert comments.lstrip().startswith("% Note:") and "Effect size d_z" in comments
    assert all(ln.startswith("%") for ln in comments.strip().splitlines())


@pytest.mark.skipif(_LATEX, reason="no pdflatex or no pdftotext on PATH (texlive-latex-recommended, poppler-utils)")
def test_the_latex_compiles_to_one_table_with_its_legend(results: StudyResults, tmp_path: Path) -> None:
    tex = _latex(results)
    (tmp_path / "table.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
           r"\begin{document}", r"\input{table}", r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    text = " ".join(subprocess.run(["pdftotext", "-layout", "doc.pdf", "-"], cwd=tmp_path, check=True,
                                   capture_output=True, text=True, timeout=60).stdout.split())
    assert text.count("Table 1:") == 1 and "Table 2" not in text
    assert ("Table 1: MAP = MRR = MRR@10, P@1 = R-Prec, nDCG@10: mean ± SD over 3 seeds; crossed test "
            "against the baseline, Holm over 6 comparisons") in text
    assert ("† p < 0.05, ‡ p < 0.01 better than the baseline; ↓, ⇓ worse; crossed test, Holm, m = 6"
            in text)
    assert "Effect size" not in text and "ir-measures" not in text
    assert "curriculum" in text and "smoothing" in text


@pytest.mark.skipif(_LATEX or shutil.which("lualatex") is None, reason="no pdflatex, pdftotext or lualatex")
def test_names_pdflatex_cannot_set_say_which_engine_can(tmp_path: Path) -> None:
    """A configuration named in Chinese stopped pdflatex ("Unicode character ... not set up for use
    with LaTeX") under a first line that promised booktabs would do. The line now names the
    letters and the engines that set them; lualatex compiles the same table."""
    results = StudyResults.build(_records({"baseline": 0.0, "精度-ls": 1.2}), baseline="baseline")
    tex = _latex(results)
    first = tex.splitlines()[0]
    assert first.endswith(r"\usepackage{booktabs} (and \usepackage[T1]{fontenc} for < and >); its text "
                          "holds 度精, which pdflatex cannot set: compile with lualatex or xelatex and a font "
                          "that has them"), first
    (tmp_path / "table.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage{booktabs}", r"\begin{document}", r"\input{table}",
           r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    for engine, rc in (("pdflatex", 1), ("lualatex", 0)):
        proc = subprocess.run([engine, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == rc, (engine, proc.stdout[-2000:])
    # A table of Latin names keeps the one line it had.
    assert _latex(StudyResults.build(_records({"baseline": 0.0, "Präzision": 1.2}), baseline="baseline")
                  ).splitlines()[0].endswith("for < and >)")


def test_the_csv_carries_the_full_note_once_per_table(results: StudyResults) -> None:
    analysis = analyse(results)
    tables = build_tables(analysis, "seeds")
    rows = list(csv.DictReader(io.StringIO(render(tables, "csv"))))
    notes = [r["note"] for r in rows if r["note"]]
    assert len(notes) == len(tables) == 3
    assert all("Effect size d_z" in n and "Holm" in n for n in notes)
