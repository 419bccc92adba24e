"""The power figures' critical tables are cached on disk (harness.stats.power.critical_table): a
cached table is the computed one exactly, a new design or level gets its own file, and a file that
is not a table of this shape is recomputed, not used."""

from __future__ import annotations

import numpy as np
import pytest

from harness.stats import power
from harness.stats.crossed import VarianceComponents


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    power.critical_table.cache_clear()
    power.mde.cache_clear()
    yield tmp_path / "power"
    power.critical_table.cache_clear()
    power.mde.cache_clear()


def test_a_cached_table_is_the_computed_one(cache, monkeypatch) -> None:
    w, c = power.critical_table(3, 20, 0.05)
    assert c.min() == 0  # where no node's pivot is positive: a valid table has zeros
    (saved,) = cache.glob("critical-3-20-*.npz")
    want_w, want_c = power.compute_critical_table(3, 20, 0.05)
    power.critical_table.cache_clear()

    def not_again(*args):
        raise AssertionError(f"computed again: {args}")

    with monkeypatch.context() as patch:
        patch.setattr(power, "compute_critical_table", not_again)
        again_w, again_c = power.critical_table(3, 20, 0.05)  # read from the file this time
    for got in (w, again_w):
        np.testing.assert_array_equal(got, want_w)
    for got in (c, again_c):
        np.testing.assert_array_equal(got, want_c)
    power.critical_table(3, 20, 0.05 / 3)
    power.critical_table(4, 20, 0.05)
    assert len(list(cache.glob("critical-*.npz"))) == 3 and saved.exists()


def test_a_file_that_is_not_the_table_is_recomputed(cache) -> None:
    power.critical_table(3, 20, 0.05)
    (saved,) = cache.glob("critical-3-20-*.npz")
    want = power.compute_critical_table(3, 20, 0.05)[1]
    for w, c in [(np.linspace(-1, 1, power.SHARES), np.full(power.SHARES, np.nan)),
                 (np.linspace(-1, 1, 7), np.ones(7)),
                 (np.zeros(power.SHARES), np.ones(power.SHARES))]:
        with saved.open("wb") as fh:
            np.savez(fh, w=w, c=c)
        power.critical_table.cache_clear()
        np.testing.assert_array_equal(power.critical_table(3, 20, 0.05)[1], want)
    saved.write_bytes(b"not a table")
    power.critical_table.cache_clear()
    np.testing.assert_array_equal(power.critical_table(3, 20, 0.05)[1], want)


def test_the_mde_is_the_same_from_a_cold_and_a_warm_cache(cache) -> None:
    comps = VarianceComponents(seed=1e-4, query=4e-3, resid=1e-2)
    cold = power.mde(comps, 3, 20, level=0.05, power=0.8)
    power.critical_table.cache_clear()
    power.mde.cache_clear()
    assert power.mde(comps, 3, 20, level=0.05, power=0.8) == cold
