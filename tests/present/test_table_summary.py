"""The summary form (one row per configuration: mean, SD, difference, interval, marker) and the
``auto`` default that picks it past table.SUMMARY_ABOVE configurations, on a 20-configuration study
built in memory; numbers checked against numpy and scipy."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pytest
from scipy import stats

from harness.analysis import StudyAnalysis, TableOptions
from harness.present.table import SUMMARY_ABOVE, resolve_form
from harness.results.stored import RunRecord, StudyResults

SEEDS = ("1", "2", "3")
QUERIES = tuple(f"q{i}" for i in range(40))


def _study(n_configs: int) -> StudyResults:
    """``n_configs`` configurations (c00 the baseline) x 3 seeds x 40 queries of per-query AP-like
    values: configuration k adds a shift that is not monotone in k, so sorting is exercised."""
    rng = np.random.default_rng(31)
    query_effect = rng.uniform(0.2, 0.7, len(QUERIES))
    shifts = rng.permutation(np.linspace(-0.05, 0.08, n_configs))
    shifts[0] = 0.0
    records = []
    for k in range(n_configs):
        for seed in SEEDS:
            v = np.clip(query_effect + shifts[k] + rng.normal(0, 0.05, len(QUERIES)), 0, 1)
            records.append(RunRecord(config=f"c{k:02d}", seed=seed,
                                     per_query={"map": dict(zip(QUERIES, v.tolist(), strict=True))}))
    return StudyResults.build(records)


def _md_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines()
            if ln.startswith("| ") and not ln.startswith("| configuration") and not ln.startswith("| seed")]


@pytest.fixture(scope="module")
def twenty() -> StudyAnalysis:
    return StudyAnalysis(results=_study(20), options=TableOptions(test="seed-averaged", correction="holm"))


def test_auto_threshold() -> None:
    assert SUMMARY_ABOVE == 6
    assert [resolve_form("auto", n) for n in (2, 6, 7, 20)] == ["seeds", "seeds", "summary", "summary"]
    assert resolve_form("seeds", 20) == "seeds" and resolve_form("configs", 20) == "configs"


def test_twenty_configurations_default_md_is_one_row_each(twenty: StudyAnalysis) -> None:
    """The default markdown table: 20 rows of 5 columns (not 3 seed rows of 21 columns), the
    baseline first, then by mean (best first); mean, SD, difference and interval equal numpy's and
    scipy's paired t-test over seed-averaged queries, and the marker agrees with Holm's adjusted p."""
    res = twenty.results
    text = twenty.table().to_markdown()
    rows = _md_rows(text)
    header = next(ln for ln in text.splitlines() if ln.startswith("| configuration"))
    assert header == "| configuration | mean | SD | Δ | 95% CI |"
    assert len(rows) == 20 and all(len(r) == 5 for r in rows)
    names = [r[0] for r in rows]
    per_query = {c: np.array([[res.runs[(c, s)].per_query["map"][q] for q in QUERIES] for s in SEEDS])
                 for c in res.configs}
    means = {c: v.mean(axis=1).mean() for c, v in per_query.items()}
    assert names[0] == "c00"
    assert names[1:] == sorted((c for c in res.configs if c != "c00"), key=lambda c: -means[c])
    base = per_query["c00"].mean(axis=0)
    p_raw = {}
    for name, mean, sd, diff, interval in rows:
        mean_value = float(mean.strip("*"))
        assert mean_value == pytest.approx(means[name], abs=5e-5)
        assert float(sd) == pytest.approx(np.std(per_query[name].mean(axis=1), ddof=1), abs=5e-5)
        assert mean.startswith("**") == (round(means[name], 4) == round(max(means.values()), 4))
        if name == "c00":
            assert diff == interval == "\u2013"
            continue
        cand = per_query[name].mean(axis=0)
        ref = stats.ttest_rel(cand, base)
        number = re.fullmatch(r"(-?\d\.\d{4})([\u2020\u2021\u2193\u21d3]?)", diff)
        assert number, diff
        assert float(number.group(1)) == pytest.approx((cand - base).mean(), abs=5e-5)
        p_raw[name] = (ref.pvalue, number.group(2), (cand - base).mean(), interval, ref)
    # Holm over the 19 comparisons (statsmodels' own implementation), then the markers.
    from statsmodels.stats.multitest import multipletests

    order = list(p_raw)
    adjusted = multipletests([p_raw[c][0] for c in order], method="holm")[1]
    for c, p in zip(order, adjusted, strict=True):
        p_c, marker, d, interval, ref = p_raw[c]
        # the interval at the level Holm's step implies: 1 - 0.05 p / p_holm (docs/statistics.md)
        low, high = ref.confidence_interval(1 - 0.05 * min(1.0, p_c / p))
        assert interval == f"[{low:.4f}, {high:.4f}]"
        assert (low > 0 or high < 0) == (p < 0.05)
        expected = "" if p >= 0.05 else ("\u2020" if p >= 0.01 else "\u2021") if d > 0 else \
            ("\u2193" if p >= 0.01 else "\u21d3")
        assert marker == expected, (c, p, marker)
    assert any(v[1] for v in p_raw.values()) and any(not v[1] for v in p_raw.values())


def test_twenty_configurations_every_format(twenty: StudyAnalysis) -> None:
    """LaTeX, HTML and CSV get the same form by default: a row per configuration, in the same order."""
    table = twenty.table()
    order = [r[0] for r in _md_rows(table.to_markdown())]
    latex = table.to_latex()
    body = latex[latex.index(r"\midrule") + len(r"\midrule"):latex.index(r"\bottomrule")].strip().splitlines()
    assert [ln.split(" & ")[0] for ln in body] == order and all(ln.count(" & ") == 4 for ln in body)
    assert r"\label{tab:harness-summary-map}" in latex
    html = table.to_html()
    assert re.findall(r"<tr><th>(c\d\d)</th>", html) == order
    rows = list(csv.DictReader(io.StringIO(table.to_csv())))
    assert [r["row"] for r in rows if r["column"] == "mean"] == order
    tested = [r for r in rows if r["column"] == "\u0394" and r["row"] != "c00"]
    assert len(tested) == 19 and all(r["p_adjusted"] and r["ci_low"] for r in tested)


def test_six_configurations_keep_the_seeds_form() -> None:
    analysis = StudyAnalysis(results=_study(6), options=TableOptions(test="seed-averaged"))
    text = analysis.table().to_markdown()
    assert "| seed | c00 | c01 | c02 | c03 | c04 | c05 |" in text
    assert text == analysis.table(form="seeds").to_markdown()
