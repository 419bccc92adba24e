"""Multiple-comparison corrections: adjusted p-values over a family of m comparisons.

A comparison is significant at level a when its adjusted p-value is below a; the adjusted values are
capped at 1. With p_(1) <= ... <= p_(m) the sorted p-values:

- ``none``:        p_i
- ``bonferroni``:  min(1, m p_i)                                   (family-wise error rate)
- ``holm``:        p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))  (FWER, step-down; Holm 1979)
- ``bh``:          p~_(i) = min_{j >= i} min(1, m p_(j) / j)        (false discovery rate, step-up;
                   Benjamini & Hochberg 1995)
- ``maxt``:        p~_i = P(max_j |T_j| >= |t_i|) under the joint null distribution of the family's
                   statistics, their correlation estimated from the shared baseline's runs (FWER,
                   single-step; Dunnett 1955). It needs the statistics and the data, not the p-values
                   alone, so ``harness.stats.significance.analyse`` runs it
                   (``harness.stats.maxt``), and ``adjust`` refuses it.

>>> [round(float(p), 4) for p in adjust("holm", [0.01, 0.04, 0.03])]
[0.03, 0.06, 0.06]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from harness.errors import DataError
from harness.registry import Registry

CORRECTIONS: Registry[Callable[[np.ndarray], np.ndarray]] = Registry("evaluation.correction")
# What every table, study report and analysis corrects with unless told otherwise: the family-wise
# error rate, step-down (at least as powerful as Bonferroni under any dependence).
DEFAULT_CORRECTION = "holm"
MAXT = "maxt"
# The tests max-t is for: a statistic with a t form (a mean over its standard error) whose joint
# null is estimated from the queries the comparisons share. Where it would rest on the seeds (the
# crossed test, across-seeds), a few seeds cannot estimate it and max-t exceeded its family-wise
# error in seeded null studies (MAXT_SEED_REASON; docs/statistics.md, "Max-t").
MAXT_TESTS = ("per-seed", "seed-averaged")
MAXT_SEED_TESTS = ("crossed", "across-seeds")
MAXT_SEED_REASON = ("its joint null would be estimated from the seeds, and with few seeds max-t exceeds its "
                    "family-wise error (6-8% under the crossed test at 2-5 seeds, 19% across 3 seeds, in "
                    "seeded null studies)")


@CORRECTIONS.register("none")
def _none(p: np.ndarray) -> np.ndarray:
    """no correction for multiple comparisons"""
    return p.copy()


@CORRECTIONS.register("bonferroni")
def _bonferroni(p: np.ndarray) -> np.ndarray:
    """Bonferroni correction"""
    return np.asarray(np.minimum(1.0, p * len(p)))


@CORRECTIONS.register("holm")
def _holm(p: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni correction"""
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.empty_like(p)
    out[order] = stepped
    return out


@CORRECTIONS.register("bh")
def _bh(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg (false discovery rate) correction"""
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    stepped = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    out = np.empty_like(p)
    out[order] = stepped
    return out


@CORRECTIONS.register(MAXT)
def _maxt(p: np.ndarray) -> np.ndarray:
    """single-step max-|t| correction (Dunnett) over comparisons sharing the baseline's runs"""
    raise DataError("the maxt correction needs the test statistics and their correlation, not p-values "
                    "alone: run it through harness.stats.significance.analyse")


def adjust(correction: str, p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Adjusted p-values of one family, in the input order."""
    fn = CORRECTIONS.get(correction)
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise DataError(f"p-values must be one-dimensional, got shape {p.shape}")
    if len(p) and (np.isnan(p).any() or (p < 0).any() or (p > 1).any()):
        raise DataError("p-values must lie in [0, 1]")
    return fn(p) if len(p) else p.copy()


def describe(correction: str) -> str:
    """The footnote's words for a correction (the registered function's docstring)."""
    return (CORRECTIONS.get(correction).__doc__ or correction).strip()
