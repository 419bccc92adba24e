"""Markers, numbers and footnotes agree (issue 39): one-seed tables carry no markers by default; a
marker never points against the difference printed beside it; the interval beside a marker excludes
0 exactly when the corrected test marks; the footnote names what ran, under every test and
correction."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from harness.present.render import render
from harness.present.table import build_tables
from harness.results.stored import RunRecord, StudyResults
from harness.stats.corrections import CORRECTIONS, MAXT, MAXT_TESTS
from harness.stats.paired import BETTER, WORSE
from harness.stats.significance import TESTS, AnalysisOptions, Markers, analyse


def _study(seed: int, *, seeds: int = 3, candidates: int = 8, queries: int = 30,
           effect_sd: float = 0.03) -> StudyResults:
    """Ranker-like values in tenths: query difficulty, a training effect per run, noise; each
    candidate a random true shift (some null, some not), so random tables mix markers and none."""
    g = np.random.default_rng(seed)
    qids = [f"q{i:02d}" for i in range(queries)]
    difficulty = g.beta(2.0, 3.0, queries)
    shifts = {"base": 0.0} | {f"c{k}": float(g.choice([0.0, 0.0, 1.0, -1.0]) * g.uniform(0, effect_sd))
                              for k in range(candidates)}
    records = []
    for config, shift in shifts.items():
        own = g.normal(0, 0.02, queries)
        for s in range(seeds):
            x = difficulty + shift + (own if config != "base" else 0) + g.normal(0, 0.02) + g.normal(0, 0.1, queries)
            values = np.round(np.clip(x, 0, 1) * 10) / 10
            records.append(RunRecord(config=config, seed=str(s), per_query={"map": dict(zip(
                qids, values.tolist(), strict=True))}))
    return StudyResults.build(records)


@pytest.mark.slow
def test_one_seed_tables_are_unmarked_by_default() -> None:
    """100 seeded one-seed studies of 8 null or shifted candidates: no table of any form carries a
    marker by default, every footnote says why; the opt-in marks with the query-only symbols only."""
    multi = set(Markers().better + Markers().worse)
    opted = 0
    for k in range(100):
        res = _study(k, seeds=1)
        a = analyse(res)
        assert a.untested and not a.comparisons
        for form in ("seeds", "configs", "summary"):
            for t in build_tables(a, form):
                assert all(c.marker is None for r in t.rows for c in r.cells)
                assert "training variance cannot be estimated from one run" in t.notes.untested
        if k < 10:
            q = analyse(res, AnalysisOptions(one_seed_test="query"))
            marks = {q.marker(c) for c in q.comparisons} - {None}
            assert not marks & multi
            opted += len(marks)
    assert opted > 0  # the opt-in does mark


def _printed_delta(text: str) -> float:
    return float(re.sub(r"[^0-9.\-]", "", text.split("\u00b1")[0]))


@pytest.mark.slow
@pytest.mark.parametrize("test", ["crossed", "seed-averaged", "wilcoxon", "randomisation", "across-seeds"])
@pytest.mark.parametrize("correction", ["holm", "none", "bonferroni", "bh", MAXT])
def test_no_marker_contradicts_the_printed_difference(test: str, correction: str) -> None:
    """Random summary tables: every marked Δ has the sign of its direction, and the interval beside
    it excludes 0 exactly when the cell is marked at the loosest level (the correction's interval)."""
    if correction == MAXT and test not in MAXT_TESTS:
        pytest.skip("maxt is for the t-tests over queries (corrections.MAXT_TESTS)")
    seeds = range(6) if test in ("crossed", "seed-averaged") else range(3)
    for k in seeds:
        a = analyse(_study(100 + k), AnalysisOptions(test=test, correction=correction, resamples=2000))
        (table,) = build_tables(a, "summary")
        assert table.columns[2] == ("\u0394 (HL)" if test == "wilcoxon" else "\u0394")
        for row in table.rows[1:]:
            delta, interval = row.cells[2], row.cells[3].interval
            comp = delta.comparison
            assert comp is not None and interval is not None and delta.value == comp.estimate
            if delta.marker:
                assert (delta.value > 0) == (comp.direction == BETTER)
                assert (delta.value < 0) == (comp.direction == WORSE)
            excludes = interval[0] > 0 or interval[1] < 0
            if test == "wilcoxon":  # the interval and the test can part at ties at 0 (docs/statistics.md)
                assert not (excludes and not comp.marked)
            else:
                assert excludes == (comp.p_adjusted < 0.05), (row.label, interval, comp.p_adjusted)
            assert interval[0] <= delta.value <= interval[1]


@pytest.mark.parametrize(("test", "correction"), [
    (t, c) for t, c in itertools.product(TESTS, CORRECTIONS.names())
    if not (c == MAXT and t not in MAXT_TESTS)])
def test_the_footnote_names_what_ran(test: str, correction: str) -> None:
    """Every test and correction: the footnote names the test as it ran (the crossed test's
    generalized p-value, never a t-test), the correction, and the level of its intervals."""
    a = analyse(_study(7, candidates=3), AnalysisOptions(test=test, correction=correction, resamples=500))
    form = "summary" if test != "per-seed" else "seeds"
    text = render(build_tables(a, form), "md")
    note = text.split("\n\n")[2]
    words = {"crossed": "generalized p-value", "per-seed": "paired t-test over queries, for each seed",
             "across-seeds": "paired t-test over the per-seed means", "seed-averaged": "paired t-test over queries",
             "randomisation": "randomisation (sign-flip) test", "wilcoxon": "Wilcoxon signed-rank test"}
    assert words[test].lower() in note.lower()
    if test == "crossed":
        assert "t-test" not in note
    level = {"none": "per comparison, not corrected for the family", MAXT: "simultaneous over the family",
             "bonferroni": "at the Bonferroni level", "holm": "its Holm step implies",
             "bh": "its Benjamini-Hochberg step implies"}[correction]
    assert level in note
