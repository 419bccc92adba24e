"""W(t, i) = D + (i/m)(1 - D) for i < m, then 1 (MacAvaney et al. 2020, eq. 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.curriculum.weights import curriculum_weight
from harness.errors import ConfigError


def test_hand_computed_points() -> None:
    w = curriculum_weight(0.2, np.array([0, 25, 50, 99, 100, 1000]), m=100)
    np.testing.assert_allclose(w, [0.2, 0.4, 0.6, 0.2 + 0.99 * 0.8, 1.0, 1.0])
    assert w[4] == 1.0 and w[5] == 1.0  # exactly 1 from i = m on
    np.testing.assert_allclose(curriculum_weight([0.0, 0.5, 1.0], 10, m=40), [0.25, 0.625, 1.0])


def test_m_zero_is_unweighted_and_m_inf_never_reaches_one() -> None:
    d = np.array([0.0, 0.3, 1.0])
    assert np.array_equal(curriculum_weight(d, 0, m=0), np.ones(3))
    assert np.array_equal(curriculum_weight(d, 10**9, m=math.inf), d)


def test_anti_curriculum_uses_one_minus_d() -> None:
    np.testing.assert_allclose(curriculum_weight([0.2, 0.9], 0, m=10, anti=True), [0.8, 0.1])
    np.testing.assert_allclose(curriculum_weight([0.2, 0.9], 5, m=10, anti=True), [0.9, 0.55])


def test_vectorised_over_difficulties_and_steps() -> None:
    w = curriculum_weight(np.array([[0.0], [0.5]]), np.array([0, 5, 10]), m=10)
    np.testing.assert_allclose(w, [[0.0, 0.5, 1.0], [0.5, 0.75, 1.0]])


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(d=st.floats(0, 1), a=st.integers(0, 10_000), b=st.integers(0, 10_000),
       m=st.one_of(st.integers(0, 5000), st.just(math.inf)), anti=st.booleans())
def test_between_d_and_one_and_non_decreasing(d: float, a: int, b: int, m: float, anti: bool) -> None:
    lo, hi = sorted((a, b))
    base = 1 - d if anti else d
    w_lo, w_hi = curriculum_weight(d, [lo, hi], m=m, anti=anti)
    assert base - 1e-12 <= w_lo <= w_hi <= 1.0


def test_bad_input_is_refused() -> None:
    with pytest.raises(ConfigError, match="weighting.m"):
        curriculum_weight(0.5, 0, m=-1)
    with pytest.raises(ValueError, match="difficulty"):
        curriculum_weight(1.5, 0, m=10)
    with pytest.raises(ValueError, match="step"):
        curriculum_weight(0.5, -1, m=10)
