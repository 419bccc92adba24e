"""Issue 39's search for a more powerful small-sample reference of the crossed test that keeps its
size: seeded simulations of ranker-like null and effect studies (tests/stats/test_small_seeds.py's generator) through the default generalized p-value and two Satterthwaite
references. The figures are the table of docs/statistics.md ("Searching for a more powerful
reference"); marked slow (about a minute)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.stats.crossed import crossed_batch
from tests.stats.test_small_seeds import _mean_squares, _satterthwaite_p, _studies

STUDIES = 2000


def _kept_seed_term_p(d: np.ndarray) -> np.ndarray:
    """Satterthwaite's df with the seed term always counted (S - 1 df), its mean square never
    dropped when it falls below the residual one (floored at it): the small-sample correction that
    removes the df jump of the clamped version."""
    _, s, q = d.shape
    grand, ms_s, ms_q, ms_e = _mean_squares(d)
    a, b, c = np.maximum(ms_s, ms_e), np.maximum(ms_q, ms_e), -ms_e
    var = a + b + c
    df = var ** 2 / (a ** 2 / (s - 1) + b ** 2 / (q - 1) + c ** 2 / ((s - 1) * (q - 1)))
    return 2 * stats.t.sf(np.abs(grand) / np.sqrt(var / (s * q)), df)


REFERENCES = {"generalized": lambda d: crossed_batch(d).p_value, "satterthwaite": _satterthwaite_p,
              "satterthwaite-kept": _kept_seed_term_p}


def _band(n: int, p: float) -> int:
    """The upper 99% binomial bound of the count of n studies at a true rate p: a count above it says
    the size exceeds p."""
    return int(stats.binom.ppf(0.99, n, p))


@pytest.mark.slow
def test_sizes_and_power_of_the_candidate_references() -> None:
    """Null studies at 2, 3, 5 and 10 seeds (training SD 0.02) and a gain of 0.06 at 5 seeds: the
    default's size is not above 5% (its count within the upper 99% binomial bound) at every seed count, at 0.05 and at the 0.05 / 8 of
    Holm's first step over 8; the clamped Satterthwaite test is not; the kept-seed-term correction
    keeps its size here but gives up power at 2 and 3 seeds, so neither replaces the default."""
    rows = {}
    for seeds in (2, 3, 5, 10):
        d = _studies(STUDIES, seeds, 0.02, seed=3900 + seeds)[0]
        for name, fn in REFERENCES.items():
            p = fn(d)
            rows[(name, seeds)] = (int(np.sum(p < 0.05)), int(np.sum(p < 0.05 / 8)))
    gain = {s: _studies(1000, s, 0.02, effect=0.06, seed=3950 + s)[0] for s in (3, 5)}
    power = {(name, s): (float(np.mean(fn(d) < 0.05)), float(np.mean(fn(d) < 0.05 / 8)))
             for name, fn in REFERENCES.items() for s, d in gain.items()}
    for (name, seeds), (k, k8) in rows.items():
        print(f"{name:20s} {seeds:2d} seeds: size {k / STUDIES:.4f} at 0.05, {k8 / STUDIES:.4f} at 0.05/8")
    for (name, s), (p1, p8) in power.items():
        print(f"{name:20s} power at +0.06, {s} seeds: {p1:.3f} at 0.05, {p8:.3f} at 0.05/8")
    for seeds in (2, 3, 5, 10):
        k, k8 = rows[("generalized", seeds)]
        assert k <= _band(STUDIES, 0.05) and k8 <= _band(STUDIES, 0.05 / 8)
    assert rows[("satterthwaite", 2)][0] > _band(STUDIES, 0.05)  # liberal: why it is not the default
    assert rows[("satterthwaite", 5)][1] > _band(STUDIES, 0.05 / 8)
    assert power[("satterthwaite-kept", 3)][1] < power[("generalized", 3)][1]
