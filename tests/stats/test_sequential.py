"""The group-sequential rule of seed rounds (harness.stats.sequential): its boundaries against
scipy's multivariate normal and the published Lan-DeMets values, its futility bound against the
conditional power it stands for, and, by seeded simulation of ranker-like studies, its family-wise
error, its power against the fixed design at max seeds and the seeds it spends. docs/statistics.md
quotes the printed figures."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.errors import ConfigError
from harness.stats.corrections import adjust
from harness.stats.crossed import crossed_batch
from harness.stats.sequential import (
    CODES,
    GroupSequential,
    SeedSchedule,
    Stop,
    efficacy_bounds,
    obrien_fleming_spending,
    power_spending,
    signed_z,
)

SCHEDULE = SeedSchedule(4, 2, 12)
QUERIES = 55
NEGATIVES = 9
# Effects on the positive's score (module's generator) where the fixed design at 12 seeds has about
# 80% power: at 0.05 (one comparison) and at 0.05 / 8 (a comparison of a family of 8).
EFFECT_80 = {1: 0.10, 8: 0.145}


def _studies(n: int, candidates: int, effect: float, *, seed: int, seeds: int = SCHEDULE.max,
             training_sd: float = 0.05, noise: float = 0.2, interaction: float = 0.0) -> np.ndarray:
    """Differences candidate - baseline of ``n`` simulated studies, shape (candidates, n, seeds,
    queries). A run's per-query value is the reciprocal rank of the query's positive among
    ``NEGATIVES`` fixed negatives (values in [0, 1] with ties, MAP about 0.54): the positive scores the
    query's difficulty + the configuration's effect (``effect`` for every candidate) + the run's
    training effect (SD ``training_sd``, one per seed) + the run's per-query noise (SD ``noise``) +
    a configuration-by-query interaction (SD ``interaction``). With the defaults a run's MAP varies
    by about 0.02 between seeds. Candidates share the baseline's runs, as in a study."""
    g = np.random.default_rng(seed)
    negatives = g.normal(0.0, 1.0, (n, 1, 1, QUERIES, NEGATIVES))
    difficulty = g.normal(1.0, 1.0, (n, 1, 1, QUERIES))
    shift = np.r_[0.0, np.full(candidates, effect)][None, :, None, None]
    score = (difficulty + shift + g.normal(0, training_sd, (n, candidates + 1, seeds, 1))
             + g.normal(0, noise, (n, candidates + 1, seeds, QUERIES))
             + g.normal(0, interaction, (n, candidates + 1, 1, QUERIES)))
    rr = 1.0 / (1 + (negatives > score[..., None]).sum(axis=-1))
    return np.moveaxis(rr[:, 1:] - rr[:, :1], 1, 0)


def _scores(d: np.ndarray, looks: tuple[int, ...]) -> np.ndarray:
    """Signed z of the crossed test on the first n_k seeds of each study, shape (..., K)."""
    flat = d.reshape(-1, *d.shape[-2:])
    z = []
    for n in looks:
        r = crossed_batch(flat[:, :n])
        z.append(signed_z(r.mean, r.p_value))
    return np.stack(z, axis=-1).reshape(*d.shape[:-2], len(looks))


def _run(z: np.ndarray, design: GroupSequential) -> tuple[np.ndarray, np.ndarray]:
    """(stop, seeds spent) of each comparison run through every look the design has."""
    code, where = design.decide(z)
    return np.asarray(CODES, dtype=object)[code], np.asarray(design.looks)[where]


def _final_p(z: np.ndarray, design: GroupSequential) -> np.ndarray:
    """The two-sided p-value of each comparison's last look: the crossed test on every seed it
    received, as the final table runs it."""
    _, where = design.decide(z)
    last = np.take_along_axis(z, where[..., None], axis=-1)[..., 0]
    return np.asarray(2 * stats.norm.sf(np.abs(last)))


def _upper(n: int, p: float) -> float:
    """The 99.9% binomial upper bound of a rate p over n studies."""
    return float(stats.binom.ppf(0.999, n, p)) / n


# -- the design ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("looks", [(4, 6, 8, 10, 12), (3, 5, 7, 9)])
@pytest.mark.parametrize("alpha", [0.05, 0.05 / 8])
def test_bounds_spend_alpha_as_scipy_multivariate_normal_says(looks: tuple[int, ...], alpha: float) -> None:
    """P_0(some |z_j| >= c_j, j <= k) from scipy's multivariate normal with the canonical covariance
    min(t_i, t_j) / sqrt(t_i t_j) equals the spending function alpha t_k^rho at every look."""
    design = GroupSequential(looks=looks, alpha=alpha)
    t, c = design.fractions, design.efficacy
    for k in range(1, len(t) + 1):
        cov = np.minimum.outer(t[:k], t[:k]) / np.sqrt(np.outer(t[:k], t[:k]))
        mvn = stats.multivariate_normal(np.zeros(k), cov, maxpts=2_000_000, abseps=1e-9, releps=1e-7)
        inside = mvn.cdf(c[:k], lower_limit=-c[:k])
        spent = alpha * t[k - 1] ** 4.5 if k < len(t) else alpha
        assert 1.0 - inside == pytest.approx(spent, rel=2e-3, abs=2e-7), (k, c)


def test_lan_demets_obrien_fleming_bounds_are_the_published_ones() -> None:
    """The recursion with the O'Brien-Fleming-type function gives the bounds tabulated for 4 and 5
    equally spaced looks at two-sided 0.05 (Jennison & Turnbull 2000, Table 7.6 / Lan & DeMets)."""
    four = efficacy_bounds([0.25, 0.5, 0.75, 1.0], 0.05, obrien_fleming_spending)
    five = efficacy_bounds([0.2, 0.4, 0.6, 0.8, 1.0], 0.05, obrien_fleming_spending)
    assert four == pytest.approx([4.333, 2.963, 2.359, 2.014], abs=1e-3)
    assert five == pytest.approx([4.877, 3.357, 2.680, 2.290, 2.031], abs=1e-3)
    # One look is the fixed design; spending everything at once gives the fixed critical value.
    assert efficacy_bounds([1.0], 0.05) == pytest.approx([stats.norm.isf(0.025)])
    assert efficacy_bounds([0.5, 1.0], 0.05, power_spending(0.0))[0] == pytest.approx(stats.norm.isf(0.025))


def test_futility_bound_is_where_conditional_power_meets_its_threshold() -> None:
    design = GroupSequential(looks=SCHEDULE.looks, alpha=0.05 / 8)
    t, c, f = design.fractions, design.efficacy, design.futility
    theta = stats.norm.isf(design.alpha / 2) + stats.norm.ppf(design.power)
    for k, fk in enumerate(f):
        gamma = design.kappa * np.sqrt(1 - t[k])
        # Conditional power at the design alternative: z_K ~ N(sqrt(t) z + theta (1 - t), 1 - t).
        cp = stats.norm.sf(c[-1], loc=np.sqrt(t[k]) * fk + theta * (1 - t[k]), scale=np.sqrt(1 - t[k]))
        assert cp == pytest.approx(gamma, abs=1e-9)
        assert design.conditional_power(k, fk) == pytest.approx(gamma, abs=1e-9)
        assert 0 < fk < c[k]


def test_verdicts_of_hand_made_looks() -> None:
    design = GroupSequential(looks=(4, 6, 8, 10, 12), alpha=0.05)
    c, f = design.efficacy, design.futility
    assert design.verdict([c[0] + 0.01]).reason == "settled: better at round 1 (4 seeds)"
    assert design.verdict([1.0, -c[1] - 0.01]).reason == "settled: worse at round 2 (6 seeds)"
    assert design.verdict([1.0, f[1] - 0.01]).reason == "futility at round 2 (6 seeds)"
    assert design.verdict([1.0, 2.0]).stop is Stop.OPEN
    assert design.verdict([1.0, 2.0]).reason == "open after round 2 (6 seeds)"
    assert design.verdict([1.0, 2.0, 2.0, 2.2, c[-1] - 0.01]).reason == "max seeds (12): not settled"
    assert design.verdict([1.0, 2.0, 2.0, 2.2, c[-1]]).stop is Stop.BETTER
    # A stop is final: later looks (there are none in a study) change nothing.
    assert design.verdict([c[0] + 1, -9.0]).reason == "settled: better at round 1 (4 seeds)"
    with pytest.raises(ConfigError, match="6 looks; the design has 5"):
        design.verdict([0.0] * 6)
    assert signed_z(np.array([0.2, -0.1, 0.0]), np.array([0.05, 0.05, 1.0])) == pytest.approx(
        [1.959964, -1.959964, 0.0], abs=1e-6)


def test_schedule() -> None:
    assert SeedSchedule(4, 2, 12).looks == (4, 6, 8, 10, 12)
    assert SeedSchedule(4, 4, 10).looks == (4, 8, 10)
    assert [SeedSchedule(4, 4, 10).round_of(i) for i in range(10)] == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3]
    for bad, match in (((1, 2, 9), "seeds.start must be >= 4"), ((3, 2, 9), "seeds.start must be >= 4 .*5.8%"),
                       ((4, 0, 9), "seeds.step must be >= 1"),
                       ((4, 2, 4), "seeds.max must be larger than seeds.start"),
                       ((4, 2.5, 9), "seeds.step must be an integer")):
        with pytest.raises(ConfigError, match=match):
            SeedSchedule(*bad)  # type: ignore[arg-type]


# -- by simulation -------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("interaction", [0.0, 0.3])
def test_size_of_one_comparison_and_seeds_it_spends(interaction: float) -> None:
    """One null candidate (per-run MAP SD about 0.02, 55 queries) through the schedule 4, 6, ..., 12:
    a verdict (better or worse) in at most 5% of studies, within binomial noise; null comparisons
    spend at most 60% of the 12 seeds. A configuration-by-query interaction (the queries' share of
    the variance, which the seed-count information fractions leave out) keeps the size."""
    n = 3000 if interaction == 0.0 else 1500
    z = _scores(_studies(n, 1, 0.0, seed=11 + int(interaction * 10), interaction=interaction)[0],
                SCHEDULE.looks)
    design = GroupSequential.for_family(SCHEDULE.looks, 0.05, 1)
    stop, seeds = _run(z, design)
    size = float(np.mean([s.settled for s in stop]))
    spent = float(seeds.mean()) / SCHEDULE.max
    # The final table's marker: the crossed test on every seed the comparison received.
    table = float(np.mean(_final_p(z, design) < 0.05))
    print(f"one null comparison, interaction {interaction}: size {size:.4f}, the table's markers "
          f"{table:.4f}, seeds spent {spent:.3f} of max; stops: {_tally(stop)}")
    assert size <= _upper(n, 0.05), size
    assert table <= _upper(n, 0.05), table
    assert spent <= 0.6, spent


@pytest.mark.slow
def test_family_wise_error_and_seeds_with_eight_null_candidates() -> None:
    """8 null candidates sharing the baseline's runs, each at its Bonferroni share 0.05 / 8: at least
    one verdict in at most 5% of studies; the candidates spend at most 60% of max seeds."""
    n = 600
    z = _scores(_studies(n, 8, 0.0, seed=23), SCHEDULE.looks)  # candidates x studies x looks
    stop, seeds = _run(z, GroupSequential.for_family(SCHEDULE.looks, 0.05, 8))
    settled = np.vectorize(lambda s: s.settled)(stop)
    fwer = float(settled.any(axis=0).mean())
    spent = float(seeds.mean()) / SCHEDULE.max
    baseline = float(seeds.max(axis=0).mean()) / SCHEDULE.max  # the baseline runs every open round
    # The final table: the crossed test on the seeds each comparison received, Holm over the 8.
    p = _final_p(z, GroupSequential.for_family(SCHEDULE.looks, 0.05, 8))
    table = float(np.mean([(adjust("holm", p[:, i]) < 0.05).any() for i in range(n)]))
    print(f"8 null candidates: family-wise error {fwer:.4f}, the table's (Holm) {table:.4f}, candidates "
          f"spend {spent:.3f} of max seeds, the baseline {baseline:.3f}; stops: {_tally(stop.ravel())}")
    assert fwer <= _upper(n, 0.05), fwer
    assert table <= _upper(n, 0.05), table
    assert spent <= 0.6, spent


@pytest.mark.slow
@pytest.mark.parametrize("family", [pytest.param(1, marks=pytest.mark.heavy), 8])
def test_power_within_five_points_of_the_fixed_design_at_max_seeds(family: int) -> None:
    """At the effect where the fixed design (the crossed test of all 12 seeds at the comparison's
    level 0.05 / family) has about 80% power, the sequential rule settles 'better' in at most 5
    points fewer of the same studies."""
    n = 3000
    d = _studies(n, 1, EFFECT_80[family], seed=31 + family)[0]
    z = _scores(d, SCHEDULE.looks)
    design = GroupSequential.for_family(SCHEDULE.looks, 0.05, family)
    fixed = float(np.mean(z[:, -1] >= stats.norm.isf(design.alpha / 2)))
    stop, seeds = _run(z, design)
    power = float(np.mean(stop == Stop.BETTER))
    print(f"family of {family}: MAP gain {d.mean():.4f}; fixed design at 12 seeds {fixed:.3f}, "
          f"sequential {power:.3f} ({power - fixed:+.3f}), seeds spent {seeds.mean() / SCHEDULE.max:.3f} "
          f"of max; stops: {_tally(stop)}")
    assert 0.72 <= fixed <= 0.88, fixed
    assert power >= fixed - 0.05, (power, fixed)


@pytest.mark.parametrize("family", [1, 8])
def test_seeds_spent_with_a_large_effect(family: int) -> None:
    """Three times the 80%-power effect: settled 'better' nearly always, with at most 60% of max
    seeds."""
    n = 1000
    z = _scores(_studies(n, 1, 3 * EFFECT_80[family], seed=41 + family)[0], SCHEDULE.looks)
    stop, seeds = _run(z, GroupSequential.for_family(SCHEDULE.looks, 0.05, family))
    spent = float(seeds.mean()) / SCHEDULE.max
    print(f"family of {family}, large effect: settled better in {np.mean(stop == Stop.BETTER):.3f}, "
          f"seeds spent {spent:.3f} of max; stops: {_tally(stop)}")
    assert np.mean(stop == Stop.BETTER) >= 0.99
    assert spent <= 0.6, spent


def _tally(stop: np.ndarray) -> str:
    values, counts = np.unique([s.value for s in stop], return_counts=True)
    return ", ".join(f"{v} {c / len(stop):.3f}" for v, c in zip(values, counts, strict=True))


def test_the_bounds_docs_statistics_quotes() -> None:
    """docs/statistics.md quotes the bounds of seeds {start: 4, step: 2, max: 12} at m = 1; its
    futility bounds were those of another rule (0.133, 0.959, 1.540, 1.968)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "statistics.md").read_text()
    quoted = re.search(r"the bounds are c = ([\d., ]+); a comparison\s+stops for futility at the first four "
                       r"looks when \|z\| < ([\d., ]+)\.", text)
    assert quoted is not None
    design = GroupSequential(looks=SCHEDULE.looks, alpha=0.05)
    for numbers, bounds in zip(quoted.groups(), (design.efficacy, design.futility), strict=True):
        assert [float(x) for x in numbers.split(", ")] == [round(float(b), 3) for b in bounds]
