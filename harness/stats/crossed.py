"""The crossed seeds x queries test: paired differences d[s, q] = candidate - baseline of seed s on
query q, with both the seeds and the queries random. Pure math: numpy and scipy only.

Why: two sources of noise decide whether a configuration beats the baseline, the sample of test
queries and the training run a seed produced. A t-test over seed-averaged queries treats the seeds
as fixed (a seed that trained a better model shifts every query alike and never enters the
variance); a t-test over per-seed means treats the queries as fixed. This is the "language-as-
fixed-effect fallacy" (Clark 1973), with seeds as subjects and queries as items; the remedy there is
the quasi-F ratio over a crossed random-effects design, and this is its one-sample form.

Model (two-way crossed random effects, one observation per cell):

    d[s, q] = mu + a_s + b_q + e_sq,   a_s ~ (0, s2_seed), b_q ~ (0, s2_query), e_sq ~ (0, s2_resid)

With S seeds, Q queries, dbar the grand mean, m_s and m_q the seed and query means, the ANOVA mean
squares and their expectations are

    MS_seed  = Q sum_s (m_s - dbar)^2 / (S - 1)              E = s2_resid + Q s2_seed
    MS_query = S sum_q (m_q - dbar)^2 / (Q - 1)              E = s2_resid + S s2_query
    MS_resid = sum_sq (d - m_s - m_q + dbar)^2 / ((S-1)(Q-1))   E = s2_resid

so the components are s2_seed = (MS_seed - MS_resid) / Q, s2_query = (MS_query - MS_resid) / S and
s2_resid = MS_resid, each clamped at 0 (an ANOVA estimate can be negative; which ones were clamped is
recorded). The variance of the mean difference is

    Var(dbar) = s2_seed / S + s2_query / Q + s2_resid / (S Q)
              = (MS_seed + MS_query - MS_resid) / (S Q)          (no component clamped)

The components are clamped for reporting (the effect size, the power planning); the test itself
never clamps. Clamping a seed component estimated negative by chance replaces the seed variance by
nothing exactly when the seeds happened to agree, and with 2 or 3 seeds that happens often: the
degrees of freedom then jump from about S - 1 to about Q - 1 and the test becomes liberal (12% of
null studies marked at 2 seeds in the simulation of docs/statistics.md). Satterthwaite's (1946)
approximate df for the unclamped combination is liberal too when one of its mean squares has 1 or 2
degrees of freedom.

The p-value is therefore a generalized p-value (Tsui & Weerahandi 1989). With the observed mean
squares ms_i and independent chi-square variables X_i ~ chi2(df_i), df_seed = S - 1,
df_query = Q - 1, df_resid = (S-1)(Q-1), the generalized pivotal quantity of S Q Var(dbar) is

    R = ms_seed df_seed / X_seed + ms_query df_query / X_query - ms_resid df_resid / X_resid

and that of the mean difference is dbar - Z sqrt(R / (S Q)) with Z standard normal. The two-sided
p-value is twice its smaller tail beyond 0, p = 2 E[Phi(-|dbar| / sqrt(R / (S Q)))], a draw in which
R is not positive (a variance below zero) contributing nothing. The expectation is a product
quadrature over the three chi-square variables (``chi2_nodes``: equal-probability strata for the
few df of the seeds, Gauss rules for more), so p is deterministic; it agrees with a Monte Carlo of 8
million draws to 0.4% at p = 0.005 and 0.0005 (about that Monte Carlo's error), and with Student's t
in the limits below to 1e-4. Where one mean square carries all the variance the pivot is exactly Student's: only
seeds vary (every query of a seed moves alike), p is the across-seeds t-test's with S - 1 df; only
queries vary, the seed-averaged t-test's with Q - 1 df. Where MS_seed = MS_query = 0 (seed and query
means all equal) R is never positive, and the test uses the clamped combination, MS_resid alone:
Student's t with (S-1)(Q-1) df.

The confidence interval holds the values mu0 the test does not reject: its ends are the (1 -/+ c)/2
quantiles of the pivot's distribution (a scale mixture of normals), so the interval excludes 0
exactly when p < 1 - c. ``se`` is the point estimate sqrt(Var(dbar)) from the clamped components
(the standard error MixedLM reports), and ``df`` is the equivalent degrees of freedom: the df of a
Student t whose (1 + c)/2 quantile times ``se`` gives the interval's half-width (infinite when the
pivot's quantile is below the normal one). The effect size is dbar / sqrt(s2_seed + s2_query +
s2_resid): the mean difference in units of the standard deviation of a single (seed, query)
difference, the crossed analogue of d_z. On a balanced design the ANOVA components equal the REML
estimates of the mixed model (when none is clamped), so the components and ``se`` are those lme4 or
statsmodels' MixedLM with crossed variance components gives.

In simulated null studies (docs/statistics.md; tests/stats/test_small_seeds.py) this test keeps
its size at 2, 3 and 5 seeds where the Satterthwaite test did not. Its size is at most nominal at
every share of the seeds in the large-query limit and nominal as that share tends to 1, and none of
the candidate references tried (Kenward-Roger and a calibration at an upper confidence bound of the
seeds' share among them) kept its size at 2 to 10 seeds and detected clearly more
(docs/statistics.md, "Searching for a more powerful reference"; tests/stats/test_reference_search.py).

Seeds that tie: where the S seeds' mean differences are equal (MS_seed = 0 to rounding; a metric
that moves in steps, P@1 = k/Q, makes that common at 2 or 3 seeds when nothing differs), every draw
of the seed term is 0, and in a draw where the residual term exceeds the query term R is negative:
the pivot took such draws as a variance of 0, certainty, and its p followed P(R > 0) rather than
dbar (0.0055 at t = 1 with 2 seeds, where MixedLM's Wald test gives 0.32; 10% of tables of 8 null
candidates on binary per-query values marked one). There the pivot is R = max(MS_query (Q-1) /
X_query, MS_resid (S-1)(Q-1) / X_resid), the query and residual terms each clamped as the point
estimate clamps them: the seed-averaged t-test where the residual is 0, the pooled residual's t where
the query means tie too (as below), and near MixedLM's p between. Degenerate input: every d = 0
gives t = 0, p = 1; a constant non-zero shift gives SE = 0, t = +-inf and p = 2^(1 - S), the
sign-flip p-value of S equal seed means (``paired.tie_p``, as the paired t-test over S seeds).

References: Clark, H. H. (1973), The language-as-fixed-effect fallacy, J. Verbal Learning and Verbal
Behavior 12; Satterthwaite, F. E. (1946), Biometrics Bulletin 2(6); Tsui, K.-W. & Weerahandi, S.
(1989), Generalized p-values in significance testing of hypotheses in the presence of nuisance
parameters, J. American Statistical Association 84(406); Baayen, Davidson & Bates (2008),
Mixed-effects modeling with crossed random effects for subjects and items, J. Memory and Language 59.

>>> d = [[0.1, 0.3, 0.2], [0.2, 0.5, 0.2]]
>>> r = crossed_test(d, [[0, 0, 0], [0, 0, 0]])
>>> r.seeds, r.queries, round(r.mean_diff, 4), round(r.ms_seed, 4), round(r.ms_query, 4), round(r.ms_resid, 4)
(2, 3, 0.25, 0.015, 0.035, 0.005)
>>> round(r.se ** 2, 6), round(r.p_value, 2)     # (0.015 + 0.035 - 0.005) / 6; the pivot's p
(0.0075, 0.2)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from harness.errors import DataError
from harness.stats import distributions as dist
from harness.stats.paired import PairedResult, tie_p
from harness.stats.roots import newton, secant

SEED = "seed"
QUERY = "query"
RESIDUAL = "residual"
COMPONENTS = (SEED, QUERY, RESIDUAL)


@dataclass(frozen=True, kw_only=True)
class MeanSquares:
    """The two-way ANOVA of one S x Q matrix of differences (module docstring)."""

    seeds: int
    queries: int
    mean: float
    ms_seed: float
    ms_query: float
    ms_resid: float

    @property
    def df(self) -> tuple[int, int, int]:
        """Degrees of freedom of MS_seed, MS_query, MS_resid."""
        return self.seeds - 1, self.queries - 1, (self.seeds - 1) * (self.queries - 1)

    def components(self) -> VarianceComponents:
        """The clamped variance components (module docstring)."""
        raw = ((self.ms_seed - self.ms_resid) / self.queries,
               (self.ms_query - self.ms_resid) / self.seeds, self.ms_resid)
        return VarianceComponents(
            seed=max(0.0, raw[0]), query=max(0.0, raw[1]), resid=max(0.0, raw[2]),
            clamped=tuple(n for n, v in zip(COMPONENTS, raw, strict=True) if v < 0), raw=raw)


@dataclass(frozen=True, kw_only=True)
class VarianceComponents:
    """s2_seed, s2_query, s2_resid (clamped at 0); ``raw`` keeps the unclamped estimates and
    ``clamped`` names the components that were negative."""

    seed: float
    query: float
    resid: float
    clamped: tuple[str, ...] = ()
    raw: tuple[float, float, float] | None = None

    @property
    def total(self) -> float:
        return self.seed + self.query + self.resid

    def variance_of_mean(self, seeds: int, queries: int) -> float:
        """Var(dbar) = s2_seed / S + s2_query / Q + s2_resid / (S Q)."""
        return self.seed / seeds + self.query / queries + self.resid / (seeds * queries)


@dataclass(frozen=True, kw_only=True)
class CrossedResult(PairedResult):
    """A crossed test: ``n`` = S Q differences; the ANOVA, the components and the df besides."""

    seeds: int
    queries: int
    df: float
    se: float
    ms_seed: float
    ms_query: float
    ms_resid: float
    components: VarianceComponents

    @property
    def clamped(self) -> tuple[str, ...]:
        return self.components.clamped


def mean_squares(d: Sequence[Sequence[float]] | np.ndarray) -> MeanSquares:
    """The ANOVA mean squares of a seeds x queries matrix of differences (module docstring)."""
    x = np.asarray(d, dtype=np.float64)
    if x.ndim != 2:
        raise DataError(f"the crossed test needs a seeds x queries matrix, got shape {x.shape}")
    s, q = x.shape
    if s < 2:
        raise DataError(f"the crossed test needs at least 2 seeds, got {s}")
    if q < 2:
        raise DataError(f"the crossed test needs at least 2 queries, got {q}")
    if not np.isfinite(x).all():
        raise DataError("the differences contain NaN or infinite values")
    grand = float(x.mean())
    m_s = x.mean(axis=1, keepdims=True)
    m_q = x.mean(axis=0, keepdims=True)
    resid = x - m_s - m_q + grand
    return MeanSquares(seeds=s, queries=q, mean=grand,
                       ms_seed=q * float(((m_s - grand) ** 2).sum()) / (s - 1),
                       ms_query=s * float(((m_q - grand) ** 2).sum()) / (q - 1),
                       ms_resid=float((resid ** 2).sum()) / ((s - 1) * (q - 1)))


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """df of sum_i c_i MS_i, given the terms (c_i MS_i, df_i): V^2 / sum_i (c_i MS_i)^2 / df_i.

    Terms that are zero drop out; an all-zero sum has no df (nan)."""
    total = sum(v for v, _ in terms)
    denom = sum(v * v / df for v, df in terms if v != 0)
    return total * total / denom if denom > 0 else math.nan


def variance_terms(ms: MeanSquares) -> list[tuple[float, float]]:
    """The terms (c_i MS_i, df_i) of Var(dbar) after clamping (module docstring)."""
    comps = ms.components()
    n = ms.seeds * ms.queries
    df_s, df_q, df_e = ms.df
    # A clamped component contributes nothing: its mean square is replaced by MS_resid, and the
    # MS_resid of the replacement cancels the -MS_resid of the combination.
    terms = [(ms.ms_seed / n, df_s)] if SEED not in comps.clamped else []
    terms += [(ms.ms_query / n, df_q)] if QUERY not in comps.clamped else []
    coef = 1 - (SEED not in comps.clamped) - (QUERY not in comps.clamped)  # 1, 0 or -1
    if coef:
        terms.append((coef * ms.ms_resid / n, df_e))
    return terms


# Quadrature per chi-square variable (seed, query, residual). A chi-square with few df (the seeds')
# has a lower tail that decides the pivot's tail, and a polynomial rule resolves it poorly, so up to
# STRATA_MAX_DF df it gets probability strata: STRATA equal ones refined geometrically towards both
# ends (TAIL_STRATA more at each end, down to 1e-9), each integrated by a two-point Gauss-Legendre
# rule in probability. One node per stratum at its midpoint quantile, twice the strata (the same
# nodes), put p 1.1% to 2.1% below a Monte Carlo of 8 million draws of the pivot at p = 0.005 and
# 0.0005, always low (a liberal test); two nodes per stratum are within 0.4% of it, about the Monte
# Carlo's own error (benchmarks/crossed_quadrature.py). More df get a Gauss rule of
# NODES points: generalized Gauss-Laguerre, or past LAGUERRE_MAX_DF (where its weights overflow)
# Gauss-Hermite over the Wilson-Hilferty approximation.
STRATA_MAX_DF = 10
# The query axis has few df only at Q <= 11 queries, where 12 strata put p up to 23% below
# Student's t in its limit (5 queries, t = 6: 0.83 of scipy's p); 48 keep it within 5% (3x the nodes).
STRATA, TAIL_STRATA = (96, 48, 4), (16, 8, 2)
_GAUSS_LEGENDRE = np.polynomial.legendre.leggauss(2)
NODES = (96, 12, 4)
LAGUERRE_MAX_DF = 150
_CHUNK_VALUES = 65536  # doubles per block of comparisons x nodes (generalized_p)


def chi2_nodes(df: int, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Nodes u and weights w (summing to 1) with sum w f(u) ~ E f(X / df), X ~ chi2(df), with the
    rule sizes of ``axis`` (0 seed, 1 query, 2 residual)."""
    if df <= STRATA_MAX_DF:
        tail = np.geomspace(1e-9, 1.0 / STRATA[axis], TAIL_STRATA[axis], endpoint=False)
        edges = np.unique(np.concatenate([[0.0], tail, np.linspace(0.0, 1.0, STRATA[axis] + 1),
                                          1.0 - tail, [1.0]]))
        x, w = _GAUSS_LEGENDRE
        mid, half = (edges[:-1] + edges[1:])[:, None] / 2.0, np.diff(edges)[:, None] / 2.0
        return dist.chi2.ppf((mid + half * x).ravel(), df) / df, (half * w).ravel()
    if df <= LAGUERRE_MAX_DF:
        y, w = special.roots_genlaguerre(NODES[axis], df / 2.0 - 1.0)
        return 2.0 * y / df, w / w.sum()
    z, w = special.roots_hermitenorm(NODES[axis])
    c = 2.0 / (9.0 * df)
    return np.maximum(1.0 - c + z * math.sqrt(c), 1e-6) ** 3, w / w.sum()


@functools.lru_cache(maxsize=64)
def _inverse_draws(seeds: int, queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """df_i / X_i at the product grid of the nodes, one array per mean square, and the weights."""
    dfs = (seeds - 1, queries - 1, (seeds - 1) * (queries - 1))
    rules = [chi2_nodes(df, axis) for axis, df in enumerate(dfs)]
    inv = np.meshgrid(*[1.0 / u for u, _ in rules], indexing="ij")
    weight = np.einsum("i,j,k->ijk", *[w for _, w in rules])
    return inv[0].ravel(), inv[1].ravel(), inv[2].ravel(), weight.ravel()


def _only_residual(ms_seed: np.ndarray, ms_query: np.ndarray, ms_resid: np.ndarray) -> np.ndarray:
    """Where MS_seed and MS_query are zero (to rounding): the pivot is then the clamped combination,
    MS_resid alone, exactly Student's t with (S-1)(Q-1) df."""
    tiny = 1e-12 * np.maximum(np.maximum(ms_seed, ms_query), ms_resid)
    return (np.asarray(ms_seed) <= tiny) & (np.asarray(ms_query) <= tiny)


def _seeds_tie(ms_seed: np.ndarray, ms_query: np.ndarray, ms_resid: np.ndarray) -> np.ndarray:
    """Where the seeds' mean differences are equal: MS_seed zero to rounding, beside MS_query or
    MS_resid (module docstring, "Seeds that tie")."""
    return np.asarray(ms_seed) <= 1e-12 * np.maximum(ms_query, ms_resid)


def _constant_shift(d: np.ndarray) -> np.ndarray:
    """Where every difference of a seeds x queries matrix (the last two axes) is the same number,
    to rounding: the statistic is undefined, and p is that of S equal seed means under sign flips
    (module docstring). One rule for ``crossed_test`` and ``crossed_batch``."""
    return np.ptp(d, axis=(-2, -1)) <= 1e-12 * np.abs(d).max(axis=(-2, -1))


def pivot_variances(ms_seed: np.ndarray, ms_query: np.ndarray, ms_resid: np.ndarray,
                    seeds: int, queries: int, *, out: np.ndarray | None = None,
                    scratch: np.ndarray | None = None) -> np.ndarray:
    """The generalized pivot of Var(dbar) = R / (S Q) at every quadrature node: one row per
    comparison (module docstring); written into ``out`` (comparisons x nodes) where given, with
    ``scratch`` (the same shape) as its working space."""
    inv_s, inv_q, inv_e, _ = _inverse_draws(seeds, queries)
    a, b, e = (np.asarray(x, dtype=np.float64)[:, None] for x in (ms_seed, ms_query, ms_resid))
    if out is None:
        out = np.empty((len(a), len(inv_s)))
    if scratch is None:
        scratch = np.empty_like(out)
    # (a inv_s + b inv_q - e inv_e) / (S Q) operation by operation, in the order numpy evaluates
    # the expression: the same numbers, without a temporary array per operation.
    np.multiply(a, inv_s, out=out)
    np.multiply(b, inv_q, out=scratch)
    np.add(out, scratch, out=out)
    np.multiply(e, inv_e, out=scratch)
    np.subtract(out, scratch, out=out)
    tie = _seeds_tie(a[:, 0], b[:, 0], e[:, 0])
    if tie.any():  # seeds that tie: max(b inv_q, e inv_e), the query and residual terms clamped
        out[tie] = np.maximum(b[tie] * inv_q, e[tie] * inv_e)
    return np.divide(out, seeds * queries, out=out)


def _tail_below(x: np.ndarray, v: np.ndarray, weight: np.ndarray, *, overwrite: bool = False) -> np.ndarray:
    """P(pivot <= mean - x) per row: the weighted mean of Phi(-x / sqrt(v)) over the nodes, a node
    with a non-positive variance contributing 0 for x > 0 (and 1 for x < 0). ``overwrite``: ``v``
    is scratch, the work is done in it (no array of its size is allocated)."""
    other = np.logical_not(v > 0)
    z = v if overwrite else v.copy()
    # Phi(-z) of z = x / sqrt(v) where v > 0, else of z = +-inf (the sign of x), operation by
    # operation in place: (-x) / s is -(x / s) exactly.
    with np.errstate(divide="ignore", invalid="ignore"):
        np.copyto(z, 1.0, where=other)
        np.sqrt(z, out=z)
        np.divide(np.negative(x), z, out=z)
        np.copyto(z, np.copysign(np.inf, np.negative(x)), where=other)
    special.ndtr(z, out=z)
    # A product and numpy's own sum, not ``@``: a BLAS dot product of one vector splits it over
    # threads, which on a busy machine costs far more than the arithmetic, and its rounding
    # depends on the thread count.
    return np.multiply(z, weight, out=z).sum(axis=-1)


def generalized_p(mean: np.ndarray, ms_seed: np.ndarray, ms_query: np.ndarray, ms_resid: np.ndarray,
                  seeds: int, queries: int) -> np.ndarray:
    """Two-sided generalized p-values of many comparisons of one design (module docstring)."""
    mean = np.asarray(mean, dtype=np.float64)
    weight = _inverse_draws(seeds, queries)[3]
    out = np.empty(mean.shape)
    # Blocks of comparisons small enough that the block's arrays stay in the CPU's cache and are
    # reused from block to block: each row is computed alone, so the grouping changes no value.
    rows = max(1, _CHUNK_VALUES // weight.size)
    block, scratch = np.empty((2, min(rows, max(mean.size, 1)), weight.size))
    for lo in range(0, mean.size, rows):
        sl = slice(lo, lo + rows)
        n = len(mean[sl])
        v = pivot_variances(ms_seed[sl], ms_query[sl], ms_resid[sl], seeds, queries,
                            out=block[:n], scratch=scratch[:n])
        out[sl] = 2.0 * _tail_below(np.abs(mean[sl])[:, None], v, weight, overwrite=True)
    flat = _only_residual(ms_seed, ms_query, ms_resid)
    if flat.any():
        df_e = (seeds - 1) * (queries - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(mean[flat]) / np.sqrt(ms_resid[flat] / (seeds * queries))
        out[flat] = 2.0 * dist.t.sf(t, df_e)
    return np.minimum(out, 1.0)


def _interval_half_width(v: np.ndarray, weight: np.ndarray, confidence: float) -> float:
    """h with P(pivot <= mean - h) = (1 - c)/2 for one comparison's pivot variances ``v`` (1 row):
    nodes with a non-positive variance put their mass at the mean and add nothing for h > 0. The
    tail sum_i w_i Phi(-h / s_i) falls and is convex in h > 0: Newton's steps from below the root
    rise to it without passing it."""
    target = (1.0 - confidence) / 2.0
    keep = v > 0
    scale, w = np.sqrt(v[keep]), weight[keep]
    inv = 1.0 / scale

    def gap(h: float) -> tuple[float, float]:
        z = h * inv
        # Products and numpy's sums, not ``@``: see _tail_below.
        tail = float((special.ndtr(-z) * w).sum())
        density = float((np.exp(-0.5 * z * z) * (w * inv)).sum()) / math.sqrt(2.0 * math.pi)
        return tail - target, -density

    hi = float(scale.max()) * 50.0
    while gap(hi)[0] > 0:
        hi *= 10.0
    # The normal quantile at the mixture's mean scale: near the root, and below it in the designs
    # tried, where Newton's steps on a convex tail rise to the root without passing it.
    start = float(dist.norm.isf(target)) * float((w * scale).sum() / w.sum())
    return newton(gap, 0.0, hi, rising=False, start=start)


def equivalent_df(critical: float, confidence: float) -> float:
    """The df of a Student t whose (1 + c)/2 quantile is ``critical`` (inf at or below the normal's).
    The quantile falls with df towards the normal's z, about z + (z^3 + z) / (4 df) for many df
    (its Cornish-Fisher expansion): the solve starts from that df, by secant steps in log df."""
    q = (1.0 + confidence) / 2.0
    z = float(dist.norm.ppf(q))
    if not critical > z:
        return math.inf
    lo, hi = math.log(1e-3), math.log(1e9)
    start = min(max(math.log((z ** 3 + z) / (4.0 * (critical - z))), lo), hi)
    return math.exp(secant(lambda u: float(dist.t.ppf(q, math.exp(u))) - critical, lo, hi, rising=False,
                           start=start, xtol=1e-12))


@dataclass(frozen=True, kw_only=True)
class CrossedBatch:
    """Many crossed tests of one design at once (simulation): arrays over comparisons."""

    mean: np.ndarray
    se: np.ndarray
    statistic: np.ndarray
    p_value: np.ndarray


def crossed_batch(d: np.ndarray) -> CrossedBatch:
    """The crossed test's p-values for a stack of difference matrices, shape (N, S, Q): the same
    pivot as ``crossed_test``, vectorised for simulation."""
    x = np.asarray(d, dtype=np.float64)
    if x.ndim != 3:
        raise DataError(f"crossed_batch needs an (N, seeds, queries) array, got shape {x.shape}")
    _, s, q = x.shape
    if s < 2 or q < 2:
        raise DataError(f"the crossed test needs at least 2 seeds and 2 queries, got {s} x {q}")
    grand = x.mean(axis=(1, 2))
    m_s = x.mean(axis=2)
    m_q = x.mean(axis=1)
    ms_s = q * ((m_s - grand[:, None]) ** 2).sum(axis=1) / (s - 1)
    ms_q = s * ((m_q - grand[:, None]) ** 2).sum(axis=1) / (q - 1)
    resid = x - m_s[:, :, None] - m_q[:, None, :] + grand[:, None, None]
    ms_e = (resid ** 2).sum(axis=(1, 2)) / ((s - 1) * (q - 1))
    n = s * q
    seed_part = np.where(ms_s > ms_e, ms_s, ms_e)  # clamped point estimate, as crossed_test's se
    query_part = np.where(ms_q > ms_e, ms_q, ms_e)
    se = np.sqrt(np.maximum(seed_part + query_part - ms_e, 0.0) / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        statistic = np.where(se > 0, grand / np.where(se > 0, se, 1.0), 0.0)
    p = generalized_p(grand, ms_s, ms_q, ms_e, s, q)
    p[_constant_shift(x) & (grand != 0)] = tie_p(s)
    return CrossedBatch(mean=grand, se=se, statistic=statistic, p_value=p)


def crossed_test(candidate: Sequence[Sequence[float]] | np.ndarray,
                 baseline: Sequence[Sequence[float]] | np.ndarray, *,
                 confidence: float = 0.95) -> CrossedResult:
    """The crossed test of candidate vs baseline, both S seeds x Q queries (same order)."""
    x = np.asarray(candidate, dtype=np.float64)
    y = np.asarray(baseline, dtype=np.float64)
    if x.shape != y.shape:
        raise DataError(f"paired samples differ in shape: {x.shape} vs {y.shape}")
    if not 0.0 < confidence < 1.0:
        raise DataError(f"confidence must be in (0, 1), got {confidence}")
    d = x - y
    ms = mean_squares(d)
    comps = ms.components()
    mean = ms.mean
    constant = bool(_constant_shift(d))
    if constant:
        se, df = 0.0, math.nan
        statistic, p = (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), tie_p(ms.seeds))
        # the interval holds what the test does not reject: the point, or every value
        half = 0.0 if mean == 0 or p < 1.0 - confidence else math.inf
    else:
        se = math.sqrt(sum(v for v, _ in variance_terms(ms)))
        statistic = mean / se
        if _only_residual(ms.ms_seed, ms.ms_query, ms.ms_resid):
            df = float(ms.df[2])
            p = float(2 * dist.t.sf(abs(statistic), df))
            half = float(dist.t.ppf((1.0 + confidence) / 2.0, df)) * se
        else:
            v = pivot_variances(np.array([ms.ms_seed]), np.array([ms.ms_query]), np.array([ms.ms_resid]),
                                ms.seeds, ms.queries)
            weight = _inverse_draws(ms.seeds, ms.queries)[3]
            p = min(1.0, 2.0 * float(_tail_below(np.array([[abs(mean)]]), v, weight)[0]))
            half = _interval_half_width(v[0], weight, confidence)
            df = equivalent_df(half / se, confidence)
    sd = math.sqrt(comps.total) if not constant else 0.0
    if sd > 0:
        effect = mean / sd
    else:
        effect = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return CrossedResult(procedure="crossed", n=d.size, statistic=statistic, p_value=min(1.0, p),
                         mean_diff=mean, ci_low=mean - half, ci_high=mean + half,
                         confidence=confidence, d_z=effect, interval="crossed pivot",
                         effect_basis="the SD of one (seed, query) difference, from the variance "
                         "components", seeds=ms.seeds, queries=ms.queries,
                         df=df, se=se, ms_seed=ms.ms_seed, ms_query=ms.ms_query, ms_resid=ms.ms_resid,
                         components=comps)
