"""Power analysis: the MDE against its closed form, the seeds an effect needs, the components of a
study's comparisons. `harness power` is tested in test_power_cli.py and test_mlflow.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from harness.errors import ConfigError
from harness.results.stored import RunRecord, StudyResults
from harness.stats.crossed import VarianceComponents, crossed_test
from harness.stats.power import (
    PowerOptions,
    mde,
    power_analysis,
    power_at,
    power_of,
    query_floor,
    seeds_needed,
)

COMPS = VarianceComponents(seed=1e-4, query=4e-3, resid=1e-2)


def _statsmodels_noncentrality(df: float, alpha: float, power: float) -> float:
    """statsmodels' one-sample t power solved for the effect size d at nobs = df + 1: d sqrt(nobs)."""
    from statsmodels.stats.power import TTestPower

    d = TTestPower().solve_power(nobs=df + 1, alpha=alpha, power=power, alternative="two-sided")
    return float(d) * math.sqrt(df + 1)


@pytest.mark.slow
def test_mde_in_the_limits_is_students_noncentral_t() -> None:
    """Where only the seeds vary the crossed test is the t-test over per-seed means (S - 1 df), where
    only the queries vary the t-test over seed-averaged queries (Q - 1 df): the simulated MDE then
    equals the noncentral t's (statsmodels' TTestPower) to the simulation's precision, at the
    per-comparison and at a corrected level."""
    seeds_only = VarianceComponents(seed=1e-3, query=0.0, resid=1e-9)
    queries_only = VarianceComponents(seed=0.0, query=4e-3, resid=1e-9)
    for level in (0.05, 0.05 / 8):
        for s in (3, 5, 10):
            row = mde(seeds_only, s, 100, level=level)
            assert row.se == pytest.approx(math.sqrt(1e-3 / s), rel=1e-6)
            assert row.mde == pytest.approx(_statsmodels_noncentrality(s - 1, level, 0.8) * row.se, rel=0.02)
        row = mde(queries_only, 3, 30, level=level)
        assert row.mde == pytest.approx(_statsmodels_noncentrality(29, level, 0.8) * row.se, rel=0.02)
    # S = 5, Q = 100: Var = (.02 + .03 - .01) / 500 = 8e-5 and Satterthwaite's df of the design
    both = mde(COMPS, 5, 100, level=0.05)
    var = (0.02 + 0.03 - 0.01) / 500
    df = var ** 2 / ((0.02 / 500) ** 2 / 4 + (0.03 / 500) ** 2 / 99 + (0.01 / 500) ** 2 / 396)
    assert both.se == pytest.approx(math.sqrt(8e-5), rel=1e-12) and both.df == pytest.approx(df, rel=1e-12)
    # the generalized p-value is more conservative than Satterthwaite's t with that df
    assert both.mde > _statsmodels_noncentrality(df, 0.05, 0.8) * both.se
    assert float(power_at(_statsmodels_noncentrality(df, 0.05, 0.8), df, 0.05)) == pytest.approx(0.8, abs=1e-6)


@pytest.mark.slow
def test_seeds_needed_and_the_query_floor() -> None:
    for effect in (0.05, 0.025, 0.02):
        s = seeds_needed(COMPS, 100, effect)
        assert s is not None and mde(COMPS, s, 100).mde <= effect < mde(COMPS, s - 1, 100).mde
    floor = query_floor(COMPS, 100)
    # the one-sample t-test over 100 seed-averaged queries (statsmodels' TTestPower), not the normal
    assert floor == pytest.approx(_statsmodels_noncentrality(99, 0.05, 0.8) * math.sqrt(4e-3 / 100), rel=1e-5)
    assert floor > (stats.norm.isf(0.025) + stats.norm.ppf(0.8)) * math.sqrt(4e-3 / 100)
    assert seeds_needed(COMPS, 100, floor * 0.99) is None and mde(COMPS, 10_000, 100).mde > floor
    assert seeds_needed(VarianceComponents(seed=1e-4, query=0.0, resid=1e-2), 100, 1e-3) is not None
    assert math.isnan(mde(VarianceComponents(seed=0.0, query=0.0, resid=0.0), 3, 10).mde)  # no SE: no MDE, never 0
    # At 10 queries the t's floor is 12% above the normal one: an effect between them is out of reach
    # of any seed count (the crossed test's power at 10,000 seeds falls short), so more queries are
    # needed, not more seeds.
    normal = (stats.norm.isf(0.025) + stats.norm.ppf(0.8)) * math.sqrt(4e-3 / 10)
    floor10 = query_floor(COMPS, 10)
    assert floor10 == pytest.approx(_statsmodels_noncentrality(9, 0.05, 0.8) * math.sqrt(4e-3 / 10), rel=1e-3)
    between = (normal + floor10) / 2
    assert floor10 / normal > 1.12 and power_of(COMPS, 10_000, 10, between) < 0.79
    assert seeds_needed(COMPS, 10, between) is None
    # The floor is the limit of the model's own MDE (its critical values and draws), never above it:
    # at 3 queries and level 0.0005 the exact t's floor was 4% above, and an effect that 49 seeds
    # detect was sent for more queries.
    for q, level in ((2, 0.05), (3, 5e-4), (5, 5e-4), (10, 0.05), (100, 0.05)):
        limit = mde(COMPS, 10_000, q, level=level).mde
        assert query_floor(COMPS, q, level=level) <= limit <= query_floor(COMPS, q, level=level) * 1.001
    # (seeds_needed answers None exactly where the effect is at most the floor or the most seeds miss the
    # power; its bisection over 14 seed counts is tested above)
    assert 2.03 > query_floor(COMPS, 3, level=5e-4) and power_of(COMPS, 200, 3, 2.03, level=5e-4) >= 0.8
    # near the level the floor is the two-sided test's (the normal form's one tail put it 30% high)
    assert query_floor(COMPS, 20, power=0.06) == pytest.approx(0.00438, rel=0.01)
    assert seeds_needed(COMPS, 20, 0.005, power=0.06) is not None
    strict = seeds_needed(COMPS, 100, 0.025, level=0.05 / 8)
    assert strict is not None and strict > (seeds_needed(COMPS, 100, 0.025) or 0)


@pytest.mark.slow
def test_power_analysis_uses_the_crossed_components(records: list[RunRecord]) -> None:
    res = StudyResults.build(records)
    pa = power_analysis(res, PowerOptions(metrics=("map",), seeds=(10, 5), effect=0.02))
    assert (pa.seeds, pa.queries) == (3, 40) and len(pa.comparisons) == 3
    assert pa.family_size == 3 and pa.level == pytest.approx(0.05 / 3)  # Holm's first step
    for c in pa.comparisons:
        cand = np.array([res.query_values(c.config, s, "map") for s in res.seeds])
        base = np.array([res.query_values("base", s, "map") for s in res.seeds])
        assert c.components == crossed_test(cand, base).components
        assert [r.seeds for r in c.rows] == [3, 5, 10]  # the study's own seed count is added
        assert all(r == mde(c.components, r.seeds, 40, level=0.05 / 3) for r in c.rows)
        assert c.needed == seeds_needed(c.components, 40, 0.02, level=0.05 / 3)
    with pytest.raises(ConfigError, match="power must be in \\(0, 1\\), got 1.5"):
        PowerOptions(power=1.5)
    with pytest.raises(ConfigError, match="seeds must be seed counts >= 2, got \\[1, 5\\]"):
        PowerOptions(seeds=(1, 5))
    with pytest.raises(ConfigError, match="effect must be a positive mean difference, got -0.1"):
        PowerOptions(effect=-0.1)


def test_a_candidate_equal_to_the_baseline_has_no_mde_anywhere() -> None:
    """Per-query values equal to the baseline's in every run (a candidate that changes nothing):
    no standard error, so no MDE: the power table says not estimable, the study's last lines say
    so, and no <m>_mde_s<S> metric is recorded (it was 0.0000, a difference any study detects)."""
    import dataclasses

    from harness.driver._final_report import _power_summary
    from harness.results.stored import StudyResults
    from harness.stats.power import outcome_metrics, power_analysis
    from tests.synthetic import synthetic_records

    records = synthetic_records(queries=12, effects={"base": 0.0, "other": 0.05})
    same = [dataclasses.replace(r, config="same") for r in records if r.config == "base"]
    analysis = power_analysis(StudyResults.build([*records, *same], baseline="base"))
    rows = [r for c in analysis.comparisons if c.config == "same" for r in c.rows]
    assert rows and all(math.isnan(r.mde) for r in rows)
    got = outcome_metrics(analysis, "same")
    assert not any("_mde_s" in k for k in got) and got["map_var_seed"] == 0.0
    summary = _power_summary(analysis)
    assert "same: detectable difference not estimable (the configuration's per-query values equal" in summary
    assert "0.0000 with" not in summary and "other: detectable difference 0." in summary


def test_a_constant_difference_has_no_mde_despite_rounding() -> None:
    """b = a + 0.1 in every cell: the ANOVA's components come out about 1e-33 (float rounding of
    b - a), not 0; they are rounding, so the MDE is not estimable (it printed MDE 0.0000)."""
    from harness.present.power_text import PowerReport, not_estimable

    g = np.random.default_rng(7)
    a = g.uniform(0.1, 0.8, (3, 10))
    records = [RunRecord(config=c, seed=str(s + 1), per_query={"map": {
        f"q{q}": float(a[s, q] + (0.1 if c == "b" else 0.0)) for q in range(10)}})
        for c in ("a", "b") for s in range(3)]
    analysis = power_analysis(StudyResults.build(records))
    (c,) = analysis.comparisons
    raw = c.components.raw
    assert raw is not None and 0 < max(map(abs, raw)) < 1e-28  # rounding, not exactly 0
    assert (c.components.seed, c.components.query, c.components.resid) == (0.0, 0.0, 0.0)
    assert all(math.isnan(r.mde) for r in c.rows)
    assert not_estimable(c) == "every difference d[seed, query] is the same, so the differences have no variance"
    text = str(PowerReport(analysis=analysis))
    assert "MAP**: observed difference +0.1000" in text and "MDE not estimable" in text and "0.0000 |" not in text


def test_a_power_at_or_below_the_level_is_refused() -> None:
    """At power 0.01 every MDE was 0.0000: the test rejects about alpha / m of the time with no
    difference at all, so any power up to that is reached at a difference of 0."""
    from tests.synthetic import synthetic_records

    # 20 queries: past the small-sample quadrature of 11 or fewer, which costs seconds per table
    results = StudyResults.build(synthetic_records(queries=20, effects={"base": 0.0, "b": 0.05}))
    with pytest.raises(ConfigError, match=r"^power must be above the test's level 0.05 \(alpha / m, m = 1\), "
                                          r"got 0.01; the test rejects"):
        power_analysis(results, PowerOptions(power=0.01))
    with pytest.raises(ConfigError, match=r"level 0.0125 \(alpha / m, m = 4\), got 0.0125;"):
        power_analysis(results, PowerOptions(power=0.0125, family_size=4))
    low = power_analysis(results, PowerOptions(power=0.06, metrics=("map",)))
    assert all(0 < r.mde < 0.1 for c in low.comparisons for r in c.rows)
