"""The one-page study report (harness.present.html_report) built from StudyResults in memory: the
forest plot's rows against scipy's paired t interval, the dev-curve bands and the power curve against
independent arithmetic (statsmodels' noncentral t), the decisions' sentences, a self-contained page;
and the page in headless Chromium (Debian's /usr/bin/chromium through Playwright): no console error,
no request leaves the page, every figure decodes, and a screenshot (HARNESS_REPORT_SHOT=FILE keeps
it). `harness report` on a real MLflow store: tests/study/test_report_page.py."""

from __future__ import annotations

import base64
import itertools
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from harness.present.html_report import (
    curve_bands,
    decisions,
    forest_rows,
    own_mde,
    page_power,
    power_curve,
    report_html,
)
from harness.present.report import study_report
from harness.results.stored import StudyResults
from harness.results.study_record import StudyRecord
from harness.stats.power import mde
from harness.stats.significance import AnalysisOptions
from tests.synthetic import synthetic_records

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def results() -> StudyResults:
    return StudyResults.build(synthetic_records(queries=30), baseline="base")


@pytest.fixture(scope="module")
def report(results: StudyResults):
    return study_report(results, formats=("html",))


def _record(results: StudyResults, **extra) -> StudyRecord:
    """Dev curves of map: each seed evaluated every 100 steps up to 1000 (seed 3 of "worse" only to
    500), the tested checkpoint of each seed its best step."""
    g = np.random.default_rng(7)
    curves, tested = {}, {}
    for config in results.configs:
        curves[config], tested[config] = {}, {}
        for seed in results.seeds:
            last = 500 if (config, seed) == ("worse", "3") else 1000
            curve = tuple((s, float(0.3 + 0.08 * np.log1p(s / 100) + g.normal(0, 0.01)))
                          for s in range(100, last + 1, 100))
            curves[config][seed] = curve
            tested[config][seed] = max(curve, key=lambda p: p[1])[0]
    return StudyRecord(metric="map", curves=curves, tested=tested, **extra)


@pytest.mark.slow
def test_forest_rows_are_the_tests_differences_and_intervals(results):
    """Under the across-seeds test each row is the paired t-test over the per-seed means: its mean
    difference and 95% interval are scipy's ttest_rel ones."""
    analysis = study_report(results, AnalysisOptions(test="across-seeds", correction="none"),
                            formats=("html",)).analysis
    rows = forest_rows(analysis, "map")
    assert [r[0] for r in rows] == ["better", "same", "worse"]
    for config, diff, low, high, marker in rows:
        cand, base = results.seed_values(config, "map"), results.seed_values("base", "map")
        ci = stats.ttest_rel(cand, base).confidence_interval(0.95)
        assert diff == pytest.approx(float(np.mean(cand - base)), abs=1e-12)
        assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-10)
        p = stats.ttest_rel(cand, base).pvalue
        assert (marker != "") == (p < 0.05)


@pytest.mark.slow
def test_forest_rows_under_the_crossed_test_are_the_tables_figures(report):
    """The default (crossed) test: the rows carry what the config runs get (map_delta, map_ci_*)."""
    for config, diff, low, high, _ in forest_rows(report.analysis, "mrr"):
        m = report.outcomes[config].metrics
        assert (diff, low, high) == (m["mrr_delta"], m["mrr_ci_low"], m["mrr_ci_high"])
        assert low < diff < high


def test_curve_bands_over_seeds_with_different_steps():
    """Mean and range at each step over the seeds evaluated there (one seed stopped at step 2)."""
    steps, mean, low, high = curve_bands({"1": ((1, 0.1), (2, 0.3), (3, 0.5)), "2": ((1, 0.3), (2, 0.2)),
                                          "3": ((1, 0.2), (2, 0.4), (3, 0.7))})
    assert steps.tolist() == [1, 2, 3]
    assert mean == pytest.approx([0.2, 0.3, 0.6])
    assert low == pytest.approx([0.1, 0.2, 0.5]) and high == pytest.approx([0.3, 0.4, 0.7])


@pytest.mark.slow
def test_power_curve_is_the_noncentral_t_mde_at_each_seed_count(report):
    """Each point: the crossed test's MDE (harness.stats.power.mde) at the page's tables' corrected
    level, Holm's first step over the whole table's family (the per-metric family's level, beside
    tables corrected over every metric, described a looser test than the page ran); above Satterthwaite's noncentral-t figure at the
    uncorrected level (statsmodels' TTestPower), which overstated power; it falls with S towards the
    query floor; the study's own point is power.md's row."""
    from statsmodels.stats.power import TTestPower

    power = page_power(report)
    q = power.queries
    assert power.family_size == max(c.family_size for c in report.whole.comparisons)
    assert power.family_size == 2 * max(c.family_size for c in report.analysis.comparisons)  # MAP and MRR
    # the study's own (power/power.md, the terminal) stays beside its per-metric tables
    assert report.power.family_size == max(c.family_size for c in report.analysis.comparisons)
    comp = next(c for c in power.comparisons if c.config == "better" and c.metric == "map")
    sd, sq, sr = comp.components.seed, comp.components.query, comp.components.resid
    curve = dict(power_curve(power, "better", "map"))
    for s in (10, 40):  # df 9 and 35 (statsmodels is unreliable below df 1)
        assert curve[s] == mde(comp.components, s, q, level=0.05 / power.family_size).mde
        ms = (sr + q * sd, sr + s * sq, sr)
        var = (ms[0] + ms[1] - ms[2]) / (s * q)
        df = var ** 2 / ((ms[0] / (s * q)) ** 2 / (s - 1) + (ms[1] / (s * q)) ** 2 / (q - 1)
                         + (ms[2] / (s * q)) ** 2 / ((s - 1) * (q - 1)))
        lam = TTestPower().solve_power(nobs=df + 1, alpha=0.05, power=0.8) * math.sqrt(df + 1)
        assert curve[s] > lam * math.sqrt(var)
    values = [curve[s] for s in sorted(curve)]
    assert all(a > b for a, b in itertools.pairwise(values)) and values[-1] > comp.floor
    assert own_mde(power, "better", "map") == curve[power.seeds]  # the dot lies on its curve


@pytest.mark.slow
def test_decisions_say_what_was_decided(results, report):
    import dataclasses

    res = dataclasses.replace(results, stopped={"slow": "at step 200: worse than the baseline at rung 200"},
                              sequential={"better": "settled: better at round 2 (6 seeds)"})
    analysis = dataclasses.replace(report.analysis, results=res)
    record = StudyRecord(early_stopping={"early_stopping_steps_saved": 30.0, "early_stopping_steps_run": 90.0,
                                         "early_stopping_stopped_configs": 1.0},
                         confirmation_pick=("better", "same"))
    said = decisions(analysis, record)
    marked = [c for c in report.analysis.comparisons if report.analysis.marker(c)]
    assert said[0].startswith(f"{len(marked)} of {len(report.analysis.comparisons)} comparisons significant "
                              "(crossed test, Holm over families of 3): ")
    assert said[1] == "Confirmation: the dev objective picked better, same for retraining with the baseline on fresh seeds."
    assert ("Early stopping stopped slow at step 200: worse than the baseline at rung 200; 30 of 120 "
            "trial-steps saved (25%)") in said[2]
    assert said[3] == "Seed schedule: better: settled: better at round 2 (6 seeds) (3 seeds tested)."


@pytest.mark.slow
def test_the_page_is_self_contained(results, report):
    page = report_html(report, _record(results), title="demo <study>")
    assert page.startswith("<!DOCTYPE html>") and "<title>demo &lt;study&gt;: study report</title>" in page
    for section in ("decisions", "significance", "forest", "curves", "power"):
        assert f'<section id="{section}">' in page
    assert "<script" not in page and not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 3  # forest, curves, power
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert page.count('<table class="harness-table">') == 1 + len(report.analysis.metrics)


@pytest.mark.slow
def test_a_report_seeks_its_roots_without_scipy_optimize():
    """The analysis, the power analysis and the page (intervals, equivalent df, MDEs) solve their
    roots with harness.stats.roots' own steps: a process that makes the whole page loads neither
    scipy.optimize nor scipy.stats (their imports alone cost a report a sizeable share of its time)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from tests.synthetic import synthetic_records\n"
            "from harness.results.stored import StudyResults\n"
            "from harness.present.report import study_report\n"
            "from harness.present.html_report import report_html\n"
            "results = StudyResults.build(synthetic_records(queries=30), baseline='base')\n"
            "page = report_html(study_report(results, formats=('md', 'csv', 'html')))\n"
            "assert page.count('data:image/png') == 2\n"
            "print(sorted(m for m in ('scipy.optimize', 'scipy.stats') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_page_without_curves_or_power_says_why(results):
    """Per-run values only (no per-query values, no dev curves): no power analysis, no curves, each
    said where its figure would be."""
    from harness.results.stored import RunRecord

    runs = [RunRecord(config=c, seed=str(s), values={"map": v + s / 100})
            for c, v in (("base", 0.5), ("new", 0.6)) for s in (1, 2, 3)]
    page = report_html(study_report(StudyResults.build(runs), formats=("html",)))
    assert "No dev curves: the runs have no dev_&lt;metric&gt; history" in page
    assert "No power analysis: results has per-run values only for map" in page
    assert page.count("data:image/png") == 1  # the forest plot only


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser test needs Playwright: pip install playwright (it drives Debian's chromium)")
    if not CHROMIUM.exists():
        pytest.skip(f"browser test needs {CHROMIUM}: apt-get install -y chromium (`make test` installs it "
                    "when run as root)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


@pytest.mark.slow
def test_the_page_in_chromium(results, report, browser, tmp_path):
    """Opened from a file: no console message of level error or warning, no uncaught exception, no
    request but the page itself and its data: images, every figure decoded at its size, the table and
    the decisions on screen; a full-page screenshot."""
    stopped = StudyRecord(early_stopping={"early_stopping_steps_saved": 12.0, "early_stopping_steps_run": 48.0})
    record = _record(results, early_stopping=stopped.early_stopping)
    path = tmp_path / "report.html"
    path.write_text(report_html(report, record, title="synthetic"), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    messages, errors, requests = [], [], []
    page.on("console", lambda m: messages.append((m.type, m.text)))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    assert errors == [] and [m for m in messages if m[0] in ("error", "warning")] == []
    assert all(u == path.as_uri() or u.startswith("data:image/png;base64,") for u in requests), requests
    sizes = page.eval_on_selector_all("img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])")
    assert len(sizes) == 3 and all(done and w > 300 and h > 150 for done, w, h in sizes)
    assert page.inner_text("#significance caption") == "MAP, MRR"
    assert "better" in page.inner_text("#significance tbody")
    assert "12 of 60 trial-steps saved (20%)" in page.inner_text("#decisions")
    assert page.is_visible("#power img") and page.is_visible("#curves img")
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep = os.environ.get("HARNESS_REPORT_SHOT")
    if keep:
        shutil.copy(shot, keep)


def test_every_table_on_the_page_corrects_over_one_family(report, results):
    """The page's per-seed tables corrected over each metric's family (m = 3) beside a configs
    table over the whole table's (m = 6): a cell could be marked in one and not in the other. Every
    footnote on the page now names the same m, the power caption's included."""
    page = report_html(report, _record(results))
    sizes = set(re.findall(r"m = (\d+) comparisons", page))
    whole = max(c.family_size for c in report.whole.comparisons)
    assert sizes == {str(whole)} and whole == 6
    assert f"Holm&#x27;s first step over the table&#x27;s {whole} comparisons" in page
