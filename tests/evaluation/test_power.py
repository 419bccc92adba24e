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
from harness.stats.power import PowerOptions, mde, power_analysis, power_at, query_floor, seeds_needed

COMPS = VarianceComponents(seed=1e-4, query=4e-3, resid=1e-2)


def _statsmodels_noncentrality(df: float, alpha: float, power: float) -> float:
    """statsmodels' one-sample t power solved for the effect size d at nobs = df + 1: d sqrt(nobs)."""
    from statsmodels.stats.power import TTestPower

    d = TTestPower().solve_power(nobs=df + 1, alpha=alpha, power=power, alternative="two-sided")
    return float(d) * math.sqrt(df + 1)


def test_mde_is_the_noncentral_t_solution() -> None:
    """S = 5, Q = 100: E[MS_seed] = .01 + 100 (1e-4) = .02 (df 4), E[MS_query] = .01 + 5 (4e-3) = .03
    (df 99), E[MS_resid] = .01 (df 396); Var = (.02 + .03 - .01) / 500 = 8e-5;
    df = Var^2 / ((.02/500)^2/4 + (.03/500)^2/99 + (.01/500)^2/396); MDE = lambda SE with lambda the
    noncentrality at which the two-sided t-test has the power (statsmodels' TTestPower)."""
    row = mde(COMPS, 5, 100, alpha=0.05, power=0.8)
    var = (0.02 + 0.03 - 0.01) / 500
    df = var ** 2 / ((0.02 / 500) ** 2 / 4 + (0.03 / 500) ** 2 / 99 + (0.01 / 500) ** 2 / 396)
    assert row.se == pytest.approx(math.sqrt(8e-5), rel=1e-12)
    assert row.df == pytest.approx(df, rel=1e-12) and round(df, 3) == 14.633
    assert row.mde == pytest.approx(_statsmodels_noncentrality(df, 0.05, 0.8) * math.sqrt(8e-5), rel=1e-5)
    assert float(power_at(row.mde / row.se, df, 0.05)) == pytest.approx(0.8, abs=1e-9)
    # The usual approximation (t quantiles added) is close at this df, and not the same.
    approx = (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * math.sqrt(8e-5)
    assert row.mde != approx and row.mde == pytest.approx(approx, rel=0.01)
    strict = mde(COMPS, 5, 100, alpha=0.01, power=0.9)
    assert strict.mde == pytest.approx(_statsmodels_noncentrality(df, 0.01, 0.9) * math.sqrt(8e-5), rel=1e-5)
    # At few df the far tail and the noncentral shape matter: the test's own df, pinned to statsmodels.
    for small in (1.0, 2.1, 4.0):
        own = mde(COMPS, 3, 100, df=small)
        assert own.df == small
        assert own.mde == pytest.approx(_statsmodels_noncentrality(small, 0.05, 0.8) * own.se, rel=1e-5)


def test_seeds_needed_and_the_query_floor() -> None:
    for effect in (0.05, 0.025, 0.02):
        s = seeds_needed(COMPS, 100, effect)
        assert s is not None and mde(COMPS, s, 100).mde <= effect < mde(COMPS, s - 1, 100).mde
    floor = query_floor(COMPS, 100)
    assert floor == pytest.approx(_statsmodels_noncentrality(99, 0.05, 0.8) * math.sqrt(4e-3 / 100), rel=1e-5)
    assert seeds_needed(COMPS, 100, floor * 0.99) is None and mde(COMPS, 10_000, 100).mde > floor
    assert seeds_needed(VarianceComponents(seed=1e-4, query=0.0, resid=1e-2), 100, 1e-3) is not None
    assert mde(VarianceComponents(seed=0.0, query=0.0, resid=0.0), 3, 10).mde == 0.0


def test_power_analysis_uses_the_crossed_components(records: list[RunRecord]) -> None:
    res = StudyResults.build(records)
    pa = power_analysis(res, PowerOptions(metrics=("map",), seeds=(10, 5), effect=0.02))
    assert (pa.seeds, pa.queries) == (3, 40) and len(pa.comparisons) == 3
    for c in pa.comparisons:
        cand = np.array([res.query_values(c.config, s, "map") for s in res.seeds])
        base = np.array([res.query_values("base", s, "map") for s in res.seeds])
        assert c.components == crossed_test(cand, base).components
        assert [r.seeds for r in c.rows] == [3, 5, 10]  # the study's own seed count is added
        # ... with the df of the test the study ran, the others with Satterthwaite's
        assert c.rows[0].df == c.observed.df and c.rows[1].df == mde(c.components, 5, 40).df
        assert c.needed == seeds_needed(c.components, 40, 0.02)
    with pytest.raises(ConfigError, match="power must be in \\(0, 1\\), got 1.5"):
        PowerOptions(power=1.5)
    with pytest.raises(ConfigError, match="seeds must be seed counts >= 2, got \\[1, 5\\]"):
        PowerOptions(seeds=(1, 5))
    with pytest.raises(ConfigError, match="effect must be a positive mean difference, got -0.1"):
        PowerOptions(effect=-0.1)
