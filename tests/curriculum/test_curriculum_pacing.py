"""Pacing functions: paper numbers (Figure 2) and properties over every registered function."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.curriculum.pacing import PACING, available, parse_pacing_name
from harness.errors import ConfigError

NAMES = PACING.names()  # every registered function; a new one is tested with no edit here
deltas = st.floats(min_value=1e-4, max_value=1.0)
Ts = st.one_of(st.integers(min_value=1, max_value=100_000), st.floats(min_value=0.5, max_value=1e6))
ns = st.floats(min_value=1.0, max_value=50.0)
fractions = st.floats(min_value=0.0, max_value=3.0)


def f(name: str, s: float, delta: float = 0.33, T: float = 1000, n: float = 2.0) -> float:
    return PACING.get(name)(s, delta=delta, T=T, n=n)


def test_registered_names_are_the_papers() -> None:
    assert set(NAMES) == {"baseline", "step", "linear", "root_n", "geom_progression"}


def first_step_reaching(name: str, level: float, n: float) -> int:
    return next(s for s in range(1001) if f(name, s, n=n) >= level)


def test_figure2_root10_makes_80_percent_available_by_step_125() -> None:
    # "root_10 introduces difficult instances very early (after 125 iterations, 80% ...)"
    assert f("root_n", 125, n=10) == pytest.approx(0.8123, abs=1e-4)
    assert 100 < first_step_reaching("root_n", 0.8, n=10) <= 125


def test_figure2_geom_progression_reaches_80_percent_near_step_800() -> None:
    # "geom_progression introduces them very late (80% is available after ~800 iterations)"
    assert f("geom_progression", 800) == pytest.approx(0.8011, abs=1e-4)
    assert 790 <= first_step_reaching("geom_progression", 0.8, n=1) <= 800


def test_table3_hand_computed_points() -> None:
    assert f("linear", 500, delta=0.2, T=1000) == pytest.approx(0.6)
    root2 = math.sqrt(0.5 * (1 - 0.33**2) + 0.33**2)
    assert f("root_n", 500, delta=0.33, T=1000, n=2) == pytest.approx(root2)
    assert f("geom_progression", 500, delta=0.25, T=1000) == pytest.approx(0.5)
    assert [f("step", s, delta=0.2, T=100) for s in (0, 33, 34, 66, 67)] == [0.2, 0.2, 0.66, 0.66, 1.0]
    assert f("baseline", 0) == 1.0


def test_step_follows_the_paper_not_the_authors_code() -> None:
    assert f("step", 0, delta=0.1) == 0.1  # the authors' code would give 0.33 regardless of delta


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=80, deadline=None)
@given(delta=deltas, T=Ts, n=ns)
def test_starts_at_delta_and_ends_at_exactly_one(name: str, delta: float, T: float, n: float) -> None:
    start = PACING.get(name)(0, delta=delta, T=T, n=n)
    assert start == (1.0 if name == "baseline" else delta)
    for s in (T, T * 1.0000001, T + 1, 10 * T):
        assert PACING.get(name)(s, delta=delta, T=T, n=n) == 1.0  # exact: the hardest instance is in


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=80, deadline=None)
@given(delta=deltas, T=Ts, n=ns, a=fractions, b=fractions)
def test_non_decreasing_and_within_0_1(name: str, delta: float, T: float, n: float, a: float,
                                       b: float) -> None:
    lo, hi = sorted((a * T, b * T))
    fn = PACING.get(name)
    f_lo, f_hi = fn(lo, delta=delta, T=T, n=n), fn(hi, delta=delta, T=T, n=n)
    assert 0.0 < f_lo <= f_hi <= 1.0
    assert f_lo >= delta


@pytest.mark.parametrize("name", NAMES)
def test_non_decreasing_on_a_dense_grid(name: str) -> None:
    for delta, n in ((0.33, 2.0), (0.01, 40.0), (0.9, 1.0), (1.0, 3.0)):
        values = [f(name, s, delta=delta, T=997, n=n) for s in range(1100)]
        assert all(x <= y for x, y in itertools.pairwise(values))


@pytest.mark.parametrize("name", NAMES)
def test_rejects_bad_parameters_naming_the_key(name: str) -> None:
    with pytest.raises(ConfigError, match="curriculum.delta"):
        f(name, 0, delta=0.0)
    with pytest.raises(ConfigError, match="curriculum.delta"):
        f(name, 0, delta=1.5)
    with pytest.raises(ConfigError, match="curriculum.T"):
        f(name, 0, T=0)
    with pytest.raises(ValueError):
        f(name, -1)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None)
@given(delta=deltas, T=st.integers(1, 5000), n=ns, N=st.integers(0, 10_000),
       batch=st.integers(1, 64), a=fractions, b=fractions)
def test_available_is_at_least_a_batch_all_after_T_and_monotone(
        name: str, delta: float, T: int, n: float, N: int, batch: int, a: float, b: float) -> None:
    lo, hi = sorted((a * T, b * T))
    k_lo = available(lo, N, batch, name, delta=delta, T=T, n=n)
    k_hi = available(hi, N, batch, PACING.get(name), delta=delta, T=T, n=n)
    assert min(N, batch) <= k_lo <= k_hi <= N
    assert available(T, N, batch, name, delta=delta, T=T, n=n) == N


def test_available_is_the_floor_of_the_fraction() -> None:
    assert available(0, 1000, 16, "linear", delta=0.33, T=100, n=1) == 330
    assert available(50, 1001, 1, "linear", delta=0.5, T=100, n=1) == math.floor(0.75 * 1001)
    assert available(0, 1000, 16, "linear", delta=0.001, T=100, n=1) == 16
    assert available(0, 5, 16, "baseline", delta=0.33, T=100, n=1) == 5


def test_parse_pacing_name() -> None:
    assert parse_pacing_name("root_10") == ("root_n", 10.0)
    assert parse_pacing_name("root_2.5") == ("root_n", 2.5)
    assert parse_pacing_name("root_n") == ("root_n", None)
    assert parse_pacing_name("geom_progression") == ("geom_progression", None)
    with pytest.raises(ConfigError, match="valid: baseline, geom_progression, linear, root_n, step"):
        parse_pacing_name("cubic")
    with pytest.raises(ConfigError, match="curriculum.n"):
        parse_pacing_name("root_0")
    with pytest.raises(ConfigError, match="curriculum.n must be >= 1, finite, got inf"):  # 400 digits: no float
        parse_pacing_name("root_" + "9" * 400)


def test_registry_refuses_a_duplicate_name() -> None:
    with pytest.raises(ValueError, match="already registered"):
        PACING.register("linear")(lambda s, *, delta, T, n: 1.0)
