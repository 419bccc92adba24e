"""Student's t, the normal and the chi-square distribution, as ``scipy.stats`` computes them,
without importing ``scipy.stats``.

Importing ``scipy.stats`` (every distribution, every test) costs more than the tests of a whole
table; ``harness table`` and ``harness report`` pay it in every new process. The methods here
call the same ``scipy.special`` functions that ``scipy.stats``'s ``t``, ``norm`` and ``chi2``
call (``stdtr``, ``stdtrit``, ``ndtr``, ``ndtri``, ``gammaincinv``), so the values are the same
bit for bit (tests/stats/test_distributions.py compares them), and keep ``scipy.stats``'s answer
outside a distribution's domain (a df that is not positive, a probability outside [0, 1]: NaN).
The rest of ``scipy.stats`` (``ttest_rel``, ``wilcoxon``, the noncentral t, the multivariate
distributions) is imported where a test that needs it runs.

    >>> float(t.ppf(0.975, 10)) == float(special.stdtrit(10, 0.975))
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special

__all__ = ["chi2", "norm", "t"]

_PDF_C = np.sqrt(2 * np.pi)  # scipy.stats's normal density constant, the same float


def _where(valid: Any, value: Any) -> Any:
    """``value`` where ``valid``, NaN elsewhere; a 0-d result as a numpy scalar (as scipy.stats)."""
    out = np.where(valid, value, np.nan)
    return out[()] if out.ndim == 0 else out


def _ppf(q: Any, valid: Any, low: float, body: Any) -> Any:
    """A quantile as scipy.stats gives it: ``body`` inside (0, 1), the support's ends at 0 and 1."""
    q = np.asarray(q, dtype=np.float64)
    out = np.where(valid & (q > 0) & (q < 1), body,
                   np.where(valid & (q == 0), low, np.where(valid & (q == 1), np.inf, np.nan)))
    return out[()] if out.ndim == 0 else out


def _isf(q: Any, valid: Any, low: float, body: Any) -> Any:
    """An upper quantile: ``body`` inside (0, 1), the support's upper end at 0, its lower at 1."""
    q = np.asarray(q, dtype=np.float64)
    out = np.where(valid & (q > 0) & (q < 1), body,
                   np.where(valid & (q == 0), np.inf, np.where(valid & (q == 1), low, np.nan)))
    return out[()] if out.ndim == 0 else out


class _Norm:
    """The standard normal: scipy.stats.norm's ``_cdf`` = ndtr, ``_ppf`` = ndtri."""

    @staticmethod
    def cdf(x: Any) -> Any:
        return special.ndtr(np.asarray(x, dtype=np.float64))[()]

    @staticmethod
    def sf(x: Any) -> Any:
        return special.ndtr(-np.asarray(x, dtype=np.float64))[()]

    @staticmethod
    def ppf(q: Any) -> Any:
        q = np.asarray(q, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _ppf(q, np.True_, -np.inf, special.ndtri(q))

    @staticmethod
    def isf(q: Any) -> Any:
        q = np.asarray(q, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _isf(q, np.True_, -np.inf, -special.ndtri(q))

    @staticmethod
    def pdf(x: Any) -> Any:
        x = np.asarray(x, dtype=np.float64)
        return (np.exp(-x**2 / 2.0) / _PDF_C)[()]


class _T:
    """Student's t with ``df`` degrees of freedom (df = inf: the normal): ``_sf`` = stdtr(df, -x),
    ``_ppf`` = stdtrit(df, q), ``_isf`` = -stdtrit(df, q)."""

    @staticmethod
    def sf(x: Any, df: Any) -> Any:
        x, df = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(df, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            return _where(df > 0, special.stdtr(np.where(df > 0, df, 1.0), -x))

    @staticmethod
    def ppf(q: Any, df: Any) -> Any:
        q, df = np.broadcast_arrays(np.asarray(q, dtype=np.float64), np.asarray(df, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            return _ppf(q, df > 0, -np.inf, special.stdtrit(np.where(df > 0, df, 1.0), q))

    @staticmethod
    def isf(q: Any, df: Any) -> Any:
        q, df = np.broadcast_arrays(np.asarray(q, dtype=np.float64), np.asarray(df, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            return _isf(q, df > 0, -np.inf, -special.stdtrit(np.where(df > 0, df, 1.0), q))


class _Chi2:
    """The chi-square with ``df`` degrees of freedom: ``_ppf`` = 2 gammaincinv(df / 2, q)."""

    @staticmethod
    def ppf(q: Any, df: Any) -> Any:
        q, df = np.broadcast_arrays(np.asarray(q, dtype=np.float64), np.asarray(df, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            return _ppf(q, df > 0, 0.0, 2 * special.gammaincinv(np.where(df > 0, df, 1.0) / 2, q))


norm, t, chi2 = _Norm(), _T(), _Chi2()
