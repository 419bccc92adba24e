"""harness.stats.distributions gives scipy.stats's values bit for bit (it calls the special
functions scipy.stats's t, norm and chi2 call), on each domain's inside, edges and outside."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from harness.stats import distributions as dist

X = np.array([-np.inf, -40.0, -3.7, -1e-9, 0.0, 1e-300, 0.5, 1.96, 8.0, 40.0, np.inf, np.nan])
Q = np.array([-0.1, 0.0, 1e-300, 1e-12, 0.025, 0.5, 0.975, 1 - 1e-12, 1.0, 1.1, np.nan])
DF = np.array([-1.0, 0.0, 0.3, 1.0, 2.0, 7.5, 49.0, 1e6, np.inf, np.nan])


def _same(got, want) -> None:
    assert np.shape(got) == np.shape(want) and type(got) is type(want)
    np.testing.assert_array_equal(got, want)  # NaN where NaN, every other float equal


@pytest.mark.parametrize("method", ["cdf", "sf", "pdf"])
def test_norm_at_every_point(method) -> None:
    _same(getattr(dist.norm, method)(X), getattr(stats.norm, method)(X))
    for x in X:
        _same(getattr(dist.norm, method)(x), getattr(stats.norm, method)(x))


@pytest.mark.parametrize("method", ["ppf", "isf"])
def test_norm_quantiles(method) -> None:
    _same(getattr(dist.norm, method)(Q), getattr(stats.norm, method)(Q))
    for q in Q:
        _same(getattr(dist.norm, method)(q), getattr(stats.norm, method)(q))


def test_t_over_points_and_df() -> None:
    x, df = np.meshgrid(X, DF)
    _same(dist.t.sf(x, df), stats.t.sf(x, df))
    q, df = np.meshgrid(Q, DF)
    _same(dist.t.ppf(q, df), stats.t.ppf(q, df))
    _same(dist.t.isf(q, df), stats.t.isf(q, df))
    _same(dist.t.ppf(0.975, 10), stats.t.ppf(0.975, 10))
    _same(dist.t.sf(2.3, 4.5), stats.t.sf(2.3, 4.5))


def test_chi2_quantiles() -> None:
    q, df = np.meshgrid(Q, DF)
    _same(dist.chi2.ppf(q, df), stats.chi2.ppf(q, df))
    u = np.random.default_rng(0).random((50, 3))
    dfs = np.array([2.0, 49.0, 98.0])
    _same(dist.chi2.ppf(u, dfs), stats.chi2.ppf(u, dfs))


def test_the_table_and_report_paths_do_not_import_scipy_stats_or_optimize() -> None:
    """Why this module and harness.stats.roots exist: the modules of a table and the power figures
    load without scipy.stats, and without scipy.optimize until a root is sought."""
    code = ("import sys, harness.stats.significance, harness.stats.power, harness.stats.sequential, "
            "harness.stats.combined, harness.present.plots, harness.present.html_report; "
            "print(sorted(m for m in ('scipy.stats', 'scipy.optimize') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
