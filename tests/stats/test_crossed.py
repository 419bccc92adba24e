"""The crossed seeds x queries test: against statsmodels (ANOVA mean squares, MixedLM with crossed
variance components), a hand-computed fixture, its limiting cases, and a simulation of null studies
in which the seed-averaged and across-seeds t-tests are anti-conservative and the crossed test is not."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from scipy import stats

from harness.errors import DataError
from harness.stats.crossed import crossed_batch, crossed_test, mean_squares, satterthwaite
from harness.stats.paired import paired_test
from harness.stats.power import VarianceComponents, mde


def _fixture(seeds: int = 4, queries: int = 30, seed: int = 1) -> np.ndarray:
    """Differences with a seed, a query and a residual component, none of them estimated negative."""
    g = np.random.default_rng(seed)
    return (0.01 + g.normal(0, 0.03, (seeds, 1)) + g.normal(0, 0.05, (1, queries))
            + g.normal(0, 0.04, (seeds, queries)))


def _long(d: np.ndarray) -> Any:
    """The long table (a pandas DataFrame) that statsmodels' formulas read."""
    pd = pytest.importorskip("pandas")
    s, q = d.shape
    return pd.DataFrame({"d": d.ravel(), "seed": np.repeat(np.arange(s), q), "query": np.tile(np.arange(q), s),
                         "one": 1})


def test_mean_squares_equal_statsmodels_anova() -> None:
    sm = pytest.importorskip("statsmodels.api")
    from statsmodels.formula.api import ols

    d = _fixture()
    table = sm.stats.anova_lm(ols("d ~ C(seed) + C(query)", data=_long(d)).fit(), typ=1)
    ms = mean_squares(d)
    assert ms.ms_seed == pytest.approx(table.loc["C(seed)", "mean_sq"], rel=1e-10)
    assert ms.ms_query == pytest.approx(table.loc["C(query)", "mean_sq"], rel=1e-10)
    assert ms.ms_resid == pytest.approx(table.loc["Residual", "mean_sq"], rel=1e-10)
    assert ms.df == tuple(int(table.loc[k, "df"]) for k in ("C(seed)", "C(query)", "Residual"))


def test_components_and_se_equal_mixedlm_with_crossed_variance_components() -> None:
    """REML on a balanced crossed design with no component at the boundary gives the ANOVA
    components; the intercept's standard error is then sqrt(Var(dbar))."""
    sm = pytest.importorskip("statsmodels.api")
    d = _fixture()
    model = sm.MixedLM.from_formula("d ~ 1", groups="one", re_formula="0", data=_long(d),
                                    vc_formula={"seed": "0 + C(seed)", "query": "0 + C(query)"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.fit(reml=True, method="lbfgs", gtol=1e-12)
    vc = dict(zip(model.exog_vc.names, fit.vcomp, strict=True))
    res = crossed_test(d, np.zeros_like(d))
    assert res.clamped == ()
    assert res.components.seed == pytest.approx(vc["seed"], rel=1e-4)
    assert res.components.query == pytest.approx(vc["query"], rel=1e-4)
    assert res.components.resid == pytest.approx(fit.scale, rel=1e-4)
    assert res.mean_diff == pytest.approx(fit.fe_params["Intercept"], rel=1e-8)
    assert res.se == pytest.approx(fit.bse_fe["Intercept"], rel=1e-4)


def _monte_carlo(d: np.ndarray, draws: int = 1_000_000, seed: int = 0) -> tuple[float, float, float]:
    """The generalized pivot by brute force: chi-square draws for the three mean squares and a normal
    for the mean; (p, 2.5% and 97.5% quantiles of the pivot of the mean)."""
    s, q = d.shape
    g = np.random.default_rng(seed)
    m = d.mean()
    ms_s = q * ((d.mean(axis=1) - m) ** 2).sum() / (s - 1)
    ms_q = s * ((d.mean(axis=0) - m) ** 2).sum() / (q - 1)
    ms_e = ((d - d.mean(axis=1, keepdims=True) - d.mean(axis=0, keepdims=True) + m) ** 2).sum() / ((s - 1) * (q - 1))
    r = sum(ms * df / g.chisquare(df, draws) * sign
            for ms, df, sign in ((ms_s, s - 1, 1), (ms_q, q - 1, 1), (ms_e, (s - 1) * (q - 1), -1))) / (s * q)
    sd = np.sqrt(np.maximum(r, 0.0))
    p = 2 * float(np.mean(stats.norm.sf(abs(m) / np.where(sd > 0, sd, np.inf)) * (sd > 0)))
    lo, hi = np.quantile(m - g.standard_normal(draws) * sd, [0.025, 0.975])
    return p, float(lo), float(hi)


def test_hand_computed_two_by_three() -> None:
    """d = [[.1, .3, .2], [.2, .5, .2]]: seed means .2, .3; query means .15, .4, .2; grand mean .25;
    residuals 0, -.05, .05 / 0, .05, -.05.
    MS_seed = 3 (.05^2 + .05^2) / 1 = .015; MS_query = 2 (.1^2 + .15^2 + .05^2) / 2 = .035;
    MS_resid = 4 (.05^2) / 2 = .005. Components (.015 - .005)/3, (.035 - .005)/2, .005.
    Var = (.015 + .035 - .005) / 6 = .0075. p and the interval: the generalized pivot, against a
    Monte Carlo of it."""
    d = np.array([[0.1, 0.3, 0.2], [0.2, 0.5, 0.2]])
    res = crossed_test(d, np.zeros((2, 3)))
    assert (res.ms_seed, res.ms_query, res.ms_resid) == pytest.approx((0.015, 0.035, 0.005), rel=1e-12)
    c = res.components
    assert (c.seed, c.query, c.resid) == pytest.approx((0.01 / 3, 0.015, 0.005), rel=1e-12)
    assert res.se == pytest.approx(math.sqrt(0.0075), rel=1e-12)
    assert res.statistic == pytest.approx(0.25 / math.sqrt(0.0075))
    p, lo, hi = _monte_carlo(d)
    assert res.p_value == pytest.approx(p, abs=0.003)
    # 1 and 2 df: the pivot's tails are heavy, so its quantiles are noisy even at a million draws.
    assert (res.ci_low, res.ci_high) == pytest.approx((lo, hi), rel=0.05)
    assert res.ci_low == pytest.approx(0.5 - res.ci_high, rel=1e-9)  # symmetric about the mean
    assert stats.t.ppf(0.975, res.df) * res.se == pytest.approx(res.ci_high - 0.25, rel=1e-8)
    assert res.d_z == pytest.approx(0.25 / math.sqrt(0.01 / 3 + 0.015 + 0.005))
    assert res.n == 6 and res.seeds == 2 and res.queries == 3 and res.direction == "better"


@pytest.mark.parametrize("seeds, queries, seed", [(2, 40, 1), (3, 40, 2), (3, 12, 3), (5, 60, 4), (10, 40, 5)])
def test_p_and_interval_equal_a_monte_carlo_of_the_pivot(seeds: int, queries: int, seed: int) -> None:
    d = _fixture(seeds, queries, seed)
    res = crossed_test(d, np.zeros_like(d))
    p, lo, hi = _monte_carlo(d, seed=seed)
    assert res.p_value == pytest.approx(p, rel=0.02, abs=5e-4)
    assert (res.ci_low, res.ci_high) == pytest.approx((lo, hi), rel=0.02, abs=1e-3)
    # The interval is the test inverted: at its ends the test's p-value is 1 - confidence.
    for end in (res.ci_low, res.ci_high):
        assert crossed_test(d - end, np.zeros_like(d)).p_value == pytest.approx(0.05, rel=1e-6)
    batch = crossed_batch(d[None])
    assert batch.p_value[0] == pytest.approx(res.p_value, rel=1e-12)
    assert (batch.mean[0], batch.se[0]) == pytest.approx((res.mean_diff, res.se), rel=1e-12)


@pytest.mark.parametrize("seeds, queries, target", [(2, 50, 0.005), (5, 50, 5e-4)])
def test_the_seed_axis_quadrature_holds_in_the_tail(seeds: int, queries: int, target: float) -> None:
    """p at the levels Holm's steps use, against the seed axis integrated adaptively (scipy's quad
    over the chi-square's probability, the query and residual rules as shipped). One node per
    stratum put p 1.7-3% low (a liberal test), the bias of an 8-million-draw Monte Carlo of the
    pivot too (benchmarks/crossed_quadrature.py), beyond what the Monte Carlo test can see."""
    from scipy import integrate, special

    from harness.stats.crossed import chi2_nodes, generalized_p
    from harness.stats.roots import secant

    ms = np.array([0.02]), np.array([0.03]), np.array([0.01])
    mean = secant(lambda m: math.log(generalized_p(np.array([m]), *ms, seeds, queries)[0] / target),
                  1e-4, 2.0, rising=False)
    shipped = float(generalized_p(np.array([mean]), *ms, seeds, queries)[0])
    assert shipped == pytest.approx(target, rel=1e-9)
    (u_q, w_q), (u_e, w_e) = chi2_nodes(queries - 1, 1), chi2_nodes((seeds - 1) * (queries - 1), 2)
    df_s, n = seeds - 1, seeds * queries

    def tail(u: float, iq: float, ie: float) -> float:
        r = ms[0][0] * df_s / stats.chi2.ppf(u, df_s) + ms[1][0] * iq - ms[2][0] * ie
        return float(special.ndtr(-mean / math.sqrt(r / n))) if r > 0 else 0.0

    exact = 2.0 * sum(wq * we * integrate.quad(tail, 0.0, 1.0, args=(1.0 / uq, 1.0 / ue), limit=200,
                                               points=(1e-6, 1e-4, 1e-2), epsabs=1e-11, epsrel=1e-5)[0]
                      for uq, wq in zip(u_q, w_q, strict=True) for ue, we in zip(u_e, w_e, strict=True))
    print(f"{seeds} x {queries}: shipped {shipped:.6g}, adaptive {exact:.6g} ({shipped / exact - 1:+.2%})")
    assert shipped == pytest.approx(exact, rel=0.005)


def test_one_source_of_noise_gives_students_t() -> None:
    """Every query of a seed moving alike (no query or residual variance): the pivot is exactly the
    across-seeds t-test; every seed alike: the seed-averaged t-test over queries; seed and query means
    all equal (MS_seed = MS_query = 0): the pooled residual with (S-1)(Q-1) df."""
    g = np.random.default_rng(3)
    base = np.zeros((3, 20))
    for seeds in (2, 3, 5):
        queryless = np.repeat(g.normal(0.02, 0.05, (seeds, 1)), 20, axis=1)
        res = crossed_test(queryless, np.zeros((seeds, 20)))
        ref = paired_test("t", queryless.mean(axis=1), np.zeros(seeds), rng=g)
        assert res.p_value == pytest.approx(ref.p_value, rel=1e-4)
        assert (res.ci_low, res.ci_high) == pytest.approx((ref.ci_low, ref.ci_high), rel=1e-3)
        assert res.df == pytest.approx(seeds - 1, rel=1e-3)
    seedless = np.repeat(g.normal(0.02, 0.05, (1, 20)), 3, axis=0)
    res = crossed_test(seedless, base)
    ref = paired_test("t", seedless.mean(axis=0), base.mean(axis=0), rng=g)
    assert res.p_value == pytest.approx(ref.p_value, rel=1e-4) and res.df == pytest.approx(19, rel=1e-3)
    assert (res.ci_low, res.ci_high) == pytest.approx((ref.ci_low, ref.ci_high), rel=1e-4)

    flat = g.normal(0, 0.05, (3, 20))
    flat -= flat.mean(axis=1, keepdims=True) + flat.mean(axis=0, keepdims=True) - 2 * flat.mean()
    res = crossed_test(flat + 0.02, base)
    assert res.clamped == ("seed", "query") and res.se == pytest.approx(math.sqrt(res.ms_resid / 60))
    assert res.p_value == pytest.approx(2 * stats.t.sf(res.mean_diff / res.se, 38), rel=1e-12)
    assert res.df == 38


def test_degenerate_and_bad_input() -> None:
    zero = crossed_test(np.ones((3, 4)), np.ones((3, 4)))
    assert (zero.statistic, zero.p_value, zero.d_z, zero.ci_low, zero.ci_high) == (0.0, 1.0, 0.0, 0.0, 0.0)
    shift = crossed_test(np.full((3, 4), 0.3), np.full((3, 4), 0.1))
    # 3 seeds whose means tie: the sign-flip p of 3 equal numbers (tests/stats/test_ties.py)
    assert shift.p_value == 0.25 and shift.statistic == math.inf and shift.d_z == math.inf
    with pytest.raises(DataError, match="needs at least 2 seeds, got 1"):
        crossed_test(np.ones((1, 4)), np.zeros((1, 4)))
    with pytest.raises(DataError, match="needs at least 2 queries, got 1"):
        crossed_test(np.ones((3, 1)), np.zeros((3, 1)))
    with pytest.raises(DataError, match="differ in shape"):
        crossed_test(np.ones((3, 4)), np.zeros((3, 5)))
    with pytest.raises(DataError, match="seeds x queries matrix"):
        crossed_test(np.ones(4), np.zeros(4))
    with pytest.raises(DataError, match="NaN or infinite"):
        crossed_test(np.full((2, 2), np.nan), np.zeros((2, 2)))
    assert math.isnan(satterthwaite([(0.0, 3)]))


def _null_studies(n: int, seeds: int, queries: int, sd: tuple[float, float, float], effect: float,
                  seed: int) -> np.ndarray:
    """n studies' differences d[s, q] = effect + a_s + b_q + e_sq with the given SDs."""
    g = np.random.default_rng(seed)
    return (effect + g.normal(0, sd[0], (n, seeds, 1)) + g.normal(0, sd[1], (n, 1, queries))
            + g.normal(0, sd[2], (n, seeds, queries)))


def _rates(d: np.ndarray, alpha: float = 0.05) -> dict[str, float]:
    return {"crossed": float(np.mean(crossed_batch(d).p_value < alpha)),
            "seed-averaged": float(np.mean(stats.ttest_1samp(d.mean(axis=1), 0.0, axis=1).pvalue < alpha)),
            "across-seeds": float(np.mean(stats.ttest_1samp(d.mean(axis=2), 0.0, axis=1).pvalue < alpha))}


def _band(n: int, p: float = 0.05, level: float = 0.999) -> tuple[float, float]:
    lo, hi = stats.binom.interval(level, n, p)
    return lo / n, hi / n


def test_simulated_false_positive_rate_and_power() -> None:
    n = 400
    lo, hi = _band(n)
    # A modest per-seed training effect (SD 0.012) next to query (0.05) and residual (0.1) noise.
    seedy = _rates(_null_studies(n, 5, 200, (0.012, 0.05, 0.1), 0.0, seed=1))
    assert lo <= seedy["crossed"] <= hi, seedy
    assert seedy["seed-averaged"] > 0.12, seedy
    # Query variance dominating: the across-seeds test is the one that counts too little.
    queried = _rates(_null_studies(n, 10, 100, (0.01, 0.05, 0.1), 0.0, seed=2))
    assert lo <= queried["crossed"] <= hi, queried
    assert queried["across-seeds"] > 0.12, queried
    # With a true effect equal to the MDE of harness power, the crossed test's power is about 0.8.
    effect = mde(VarianceComponents(seed=0.012 ** 2, query=0.05 ** 2, resid=0.1 ** 2), 5, 200, level=0.05).mde
    power = _rates(_null_studies(n, 5, 200, (0.012, 0.05, 0.1), effect, seed=3))["crossed"]
    print(f"null rejection rates {seedy} / {queried}; power at effect {effect:.4f}: {power:.3f}")
    assert 0.7 <= power <= 0.9


def test_batched_p_values_are_the_plain_expression_bit_for_bit() -> None:
    """``crossed_batch`` evaluates the pivot in blocks, operation by operation in place: its
    p-values are those of the plain expression over all comparisons at once, bit for bit, nodes
    with a non-positive variance included (a seeds-only or queries-only comparison has many)."""
    from scipy import special

    from harness.stats import crossed as C

    g = np.random.default_rng(5)
    for seeds, queries in ((2, 16), (5, 50), (12, 55)):
        d = g.normal(0, 0.1, (60, seeds, queries)) + g.normal(0, 0.03, (60, seeds, 1))
        d[:3] += g.normal(0, 1, (3, seeds, 1))  # seed variance dominating
        d[3:6] += g.normal(0, 1, (3, 1, queries))  # query variance dominating
        mean, m_s, m_q = d.mean(axis=(1, 2)), d.mean(axis=2), d.mean(axis=1)
        ms_s = queries * ((m_s - mean[:, None]) ** 2).sum(axis=1) / (seeds - 1)
        ms_q = seeds * ((m_q - mean[:, None]) ** 2).sum(axis=1) / (queries - 1)
        resid = d - m_s[:, :, None] - m_q[:, None, :] + mean[:, None, None]
        ms_e = (resid ** 2).sum(axis=(1, 2)) / ((seeds - 1) * (queries - 1))
        inv_s, inv_q, inv_e, weight = C._inverse_draws(seeds, queries)
        v = (ms_s[:, None] * inv_s + ms_q[:, None] * inv_q - ms_e[:, None] * inv_e) / (seeds * queries)
        assert (v <= 0).any()
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(v > 0, np.abs(mean)[:, None] / np.sqrt(np.where(v > 0, v, 1.0)), np.inf)
        expected = np.minimum(2.0 * (special.ndtr(-z) * weight).sum(axis=-1), 1.0)
        assert np.array_equal(crossed_batch(d).p_value, expected), (seeds, queries)


@pytest.mark.parametrize(("queries", "t"), [(5, 6.0), (8, 5.0), (11, 6.0)])
def test_the_query_limit_holds_in_the_tail_at_few_queries(queries: int, t: float) -> None:
    """Every seed alike, few queries (the query axis on probability strata): p within 5% of Student's
    t on Q - 1 df far in the tail, where 24 strata gave 0.77-0.85 of it and could turn a † into a ‡
    (found in review; the strata per axis are crossed.STRATA)."""
    g = np.random.default_rng(queries)
    b = g.normal(0, 1, queries)
    b = (b - b.mean()) / b.std(ddof=1) + t / math.sqrt(queries)  # the seed-averaged t is t
    d = np.tile(b, (3, 1))
    ref = stats.ttest_1samp(b, 0.0).pvalue
    assert crossed_test(d, np.zeros_like(d)).p_value == pytest.approx(ref, rel=0.05)
