"""Seeds added in rounds until a comparison's verdict is settled: a group-sequential test. Pure math:
numpy and scipy only; the study driver (harness.driver._rounds) feeds it.

A seed schedule (start, step, max) trains every configuration with ``start`` seeds, then adds
``step`` seeds per round up to ``max`` (the last round may add fewer, to end at max). Round k ends
with n_k seeds: the looks n_1 < ... < n_K = max. After each round every open comparison, a candidate
against the baseline on the seeds both have, is tested, and this rule says whether its verdict is
settled (better or worse), hopeless (futility) or still open. An open comparison gets the next
round's seeds, a settled or hopeless one no more.

Statistic. The test of look k is the crossed seeds x queries test (harness.stats.crossed) of
the first n_k seeds. Its two-sided p-value becomes a signed normal score

    z_k = sign(mean_k) Phi^-1(1 - p_k / 2)

so that, where p_k is exact, z_k is standard normal under the null whatever the degrees of freedom
of look k (the "nominal significance level" form of a group-sequential test with estimated
variances; Jennison & Turnbull 2000, section 3.8).

Information. Look k's information fraction is t_k = n_k / n_K. Under the crossed model the nested
means satisfy Cov(dbar_k, dbar_l) = Var(dbar_l) for k < l (the later mean's seeds include the
earlier's, the queries are shared), so (z_1, ..., z_K) has the canonical joint distribution of a
group-sequential test (Jennison & Turnbull 2000, chapter 3): corr(z_k, z_l) = sqrt(I_k / I_l), with
I_k = 1 / Var(dbar_k) = 1 / (s2_seed / n_k + s2_query / Q + s2_resid / (n_k Q)). The seed fractions
equal I_k / I_K where the query component is 0 and are smaller otherwise; a design computed with them
assumes correlations no larger than the true ones, which makes its boundaries conservative, and needs
no variance estimate, so every look's bounds are fixed by the schedule before any seed is trained.

Efficacy (error spending; Lan & DeMets 1983). The two-sided level alpha is spent over the looks by
the power family of Kim & DeMets (1987), alpha(t) = alpha t^rho with rho = 4.5 (``SPENDING_RHO``):
look k rejects when |z_k| >= c_k, with c_k chosen so that

    P_0(|z_1| < c_1, ..., |z_{k-1}| < c_{k-1}, |z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1}),

and the last look spends what is left (t_K = 1). The probabilities come from the recursive numerical
integration of Armitage, McPherson & Rowe (1969): the density of z_k on the continuation region
(-c_k, c_k) is carried from look to look on Gauss-Legendre nodes, since z_{k+1} given z_k = x is
normal with mean x sqrt(t_k / t_{k+1}) and variance 1 - t_k / t_{k+1}.

Futility (non-binding). At a look k < K whose efficacy bound is not crossed, the comparison stops
when the conditional power of the last look at the design alternative falls below
gamma_k = kappa sqrt(1 - t_k), kappa = 0.65 (``FUTILITY_KAPPA``). The design alternative is the
effect the fixed design at max seeds detects with power 0.8 (``DESIGN_POWER``): a drift
theta = z_{alpha/2} + z_{0.2} at t = 1, in the direction of z_k, so that

    CP_k(z) = Phi((sqrt(t_k) |z| + theta (1 - t_k) - c_K) / sqrt(1 - t_k))

(Lachin 2005), and CP_k(z) < gamma_k is |z_k| < f_k with
f_k = (c_K - theta (1 - t_k) + sqrt(1 - t_k) Phi^-1(gamma_k)) / sqrt(t_k). Non-binding: the
efficacy bounds are computed as if futility never stopped anything, so stopping for futility only
lowers the chance of a false verdict, and a driver may ignore it.

Family-wise control. A study compares m candidates with one baseline; each comparison runs this
design at its Bonferroni share alpha_family / m. A comparison's seeds and statistics depend on its
own data only (the baseline's extra seeds for other comparisons are not paired with it), so the
family-wise error of the settled verdicts is at most alpha_family at every round and at the end.

Why these settings: with 2 to 5 seeds the honest p-value of the crossed test has few degrees of
freedom and cannot become very small, so the O'Brien-Fleming-type spending of Lan & DeMets (which
spends almost nothing early, the less the smaller alpha / m) lets even a large effect run to the
later rounds; rho = 4.5 spends a little more early. kappa trades the seeds spent on null comparisons
against the power lost to futility. Both were chosen by the simulation in
tests/stats/test_sequential.py, whose figures docs/statistics.md quotes: size at or below
nominal, power within 5 points of the fixed design at max seeds, seeds spent at most 60% of max
with no effect and with a large one.

References: Armitage, P., McPherson, C. K. & Rowe, B. C. (1969), Repeated significance tests on
accumulating data, J. Royal Statistical Society A 132(2); Lan, K. K. G. & DeMets, D. L. (1983),
Discrete sequential boundaries for clinical trials, Biometrika 70(3); Kim, K. & DeMets, D. L.
(1987), Design and analysis of group sequential tests based on the type I error spending rate
function, Biometrika 74(1); Jennison, C. & Turnbull, B. W. (2000), Group Sequential Methods with
Applications to Clinical Trials, Chapman & Hall; Lachin, J. M. (2005), A review of methods for
futility stopping based on conditional power, Statistics in Medicine 24(18).

>>> design = GroupSequential(looks=(4, 6, 8, 10, 12), alpha=0.05)
>>> [round(float(c), 3) for c in design.efficacy]
[3.57, 3.085, 2.686, 2.334, 2.007]
>>> design.verdict([1.2, 3.1]).reason
'settled: better at round 2 (6 seeds)'
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from harness.errors import ConfigError
from harness.stats import distributions as dist
from harness.stats.roots import brentq

# How a footnote names the rule.
RULE = ("a group-sequential rule (Lan & DeMets error spending with the Kim & DeMets power family, "
        "rho 4.5, at 0.05 / m per comparison; non-binding futility by conditional power; "
        "docs/statistics.md)")
SPENDING_RHO = 4.5
FUTILITY_KAPPA = 0.65
DESIGN_POWER = 0.8
# Gauss-Legendre nodes for the continuation region's density: the densities are smooth normal
# mixtures, which 64 nodes integrate far below the bisection's tolerance.
NODES = 64
MAX_BOUND = 40.0  # a look that spends nothing (alpha increment 0) gets this bound: never crossed

Spending = Callable[[np.ndarray, float], np.ndarray]


def power_spending(rho: float) -> Spending:
    """The power family alpha(t) = alpha t^rho (Kim & DeMets 1987)."""
    def spend(t: np.ndarray, alpha: float) -> np.ndarray:
        return alpha * np.minimum(np.asarray(t, dtype=np.float64), 1.0) ** rho
    return spend


def obrien_fleming_spending(t: np.ndarray, alpha: float) -> np.ndarray:
    """The O'Brien-Fleming-type function of Lan & DeMets (1983), two-sided:
    alpha(t) = 4 - 4 Phi(z_{alpha/4} / sqrt(t)); kept for reference (module docstring, "Why")."""
    t = np.maximum(np.asarray(t, dtype=np.float64), 1e-300)
    return np.asarray(4.0 - 4.0 * special.ndtr(dist.norm.isf(alpha / 4.0) / np.sqrt(t)))


# The fewest seeds of a schedule's first round. Each look's p-value becomes a normal score exactly,
# but the looks' scores from few seeds (few degrees of freedom) are not jointly the canonical process
# the bounds assume. benchmarks/sequential_start.py (20,000 null comparisons each, training variance
# dominant, 50 queries, level 0.05): the final table marked 5.7% of them for looks 2-6 and 5.8% for
# looks 3-6, 4.9% for looks 4, 6, ..., 12 (benchmarks/results/sequential_start.md).
MIN_START = 4


@dataclass(frozen=True)
class SeedSchedule:
    """start seeds in round 1, then ``step`` more per round up to ``max`` (module docstring)."""

    start: int
    step: int
    max: int

    def __post_init__(self) -> None:
        for name in ("start", "step", "max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"seeds.{name} must be an integer, got {value!r}", key=f"seeds.{name}")
        if self.start < MIN_START:
            raise ConfigError(f"seeds.start must be >= {MIN_START} (from fewer seeds in its first round the rule "
                              f"marks more than its level: 5.8% of null comparisons at 0.05 from 3 seeds), got "
                              f"{self.start}", key="seeds.start")
        if self.step < 1:
            raise ConfigError(f"seeds.step must be >= 1, got {self.step}", key="seeds.step")
        if self.max <= self.start:
            raise ConfigError(f"seeds.max must be larger than seeds.start ({self.start}) for a second "
                              f"round, got {self.max}; a fixed design lists its seeds", key="seeds.max")

    @property
    def looks(self) -> tuple[int, ...]:
        """The seed count at the end of each round: start, start + step, ..., max."""
        return (*range(self.start, self.max, self.step), self.max)

    @property
    def rounds(self) -> int:
        return len(self.looks)

    def round_of(self, position: int) -> int:
        """The round (1-based) that trains the seed at ``position`` (0-based) of the seed list."""
        return next(k for k, n in enumerate(self.looks, start=1) if position < n)

    def describe(self) -> str:
        looks = self.looks
        return (f"{len(looks)} rounds of seeds ({', '.join(map(str, looks))} seeds at their ends: "
                f"start {self.start}, step {self.step}, max {self.max})")


@functools.lru_cache(maxsize=256)
def _efficacy(fractions: tuple[float, ...], alpha: float, spending: Spending) -> tuple[float, ...]:
    t = np.asarray(fractions)
    spent = np.asarray(spending(t, alpha), dtype=np.float64)
    if t[-1] >= 1.0:
        spent[-1] = alpha
    bounds = [float(dist.norm.isf(spent[0] / 2.0)) if spent[0] > 0 else MAX_BOUND]
    u, w = np.polynomial.legendre.leggauss(NODES)
    x = bounds[0] * u
    mass = dist.norm.pdf(x) * w * bounds[0]  # density of z_1 on (-c_1, c_1) times node weights
    for k in range(1, len(t)):
        r = t[k - 1] / t[k]
        mu, sd = x * math.sqrt(r), math.sqrt(1.0 - r)
        target = float(spent[k] - spent[k - 1])

        def excess(c: float, mu: np.ndarray = mu, sd: float = sd, mass: np.ndarray = mass,
                   target: float = target) -> float:
            # P(no crossing before, |z_k| >= c) minus what look k may spend
            return float(mass @ (special.ndtr((mu - c) / sd) + special.ndtr((-c - mu) / sd))) - target

        if target <= 0 or excess(MAX_BOUND) >= 0:
            c = MAX_BOUND
        else:
            c = float(brentq(excess, 0.0, MAX_BOUND, xtol=1e-10))
        bounds.append(c)
        y = c * u
        mass = (dist.norm.pdf((y[:, None] - mu[None, :]) / sd) / sd) @ mass * w * c
        x = y
    return tuple(bounds)


def efficacy_bounds(fractions: Sequence[float], alpha: float,
                    spending: Spending | None = None) -> np.ndarray:
    """c_1..c_K of a two-sided design at level ``alpha`` (module docstring); ``spending`` defaults
    to the power family with rho = SPENDING_RHO."""
    return np.array(_efficacy(tuple(float(f) for f in fractions), float(alpha),
                              spending or _DEFAULT_SPENDING))


_DEFAULT_SPENDING = power_spending(SPENDING_RHO)


class Stop(enum.Enum):
    """Where a comparison stands after a look."""

    OPEN = "open"
    BETTER = "better"
    WORSE = "worse"
    FUTILITY = "futility"
    MAX = "max seeds"

    @property
    def settled(self) -> bool:
        return self in (Stop.BETTER, Stop.WORSE)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One comparison after its looks so far: ``stop`` at ``round`` (1-based) with ``seeds`` seeds,
    ``z`` there; OPEN means it needs the next round."""

    stop: Stop
    round: int
    seeds: int
    z: float

    @property
    def reason(self) -> str:
        """A one-line reason, as the config run's tag records it."""
        where = f"at round {self.round} ({self.seeds} seeds)"
        if self.stop.settled:
            return f"settled: {self.stop.value} {where}"
        if self.stop is Stop.FUTILITY:
            return f"futility {where}"
        if self.stop is Stop.MAX:
            return f"max seeds ({self.seeds}): not settled"
        return f"open after round {self.round} ({self.seeds} seeds)"


@dataclass(frozen=True, kw_only=True)
class GroupSequential:
    """The design of one comparison (module docstring): its looks (seed counts), its two-sided level
    (the family's level divided by the number of comparisons), and the futility settings."""

    looks: tuple[int, ...]
    alpha: float
    kappa: float = FUTILITY_KAPPA
    power: float = DESIGN_POWER
    spending: Spending = _DEFAULT_SPENDING

    def __post_init__(self) -> None:
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ConfigError(f"looks must be increasing seed counts, got {list(self.looks)}")
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0.0 <= self.kappa < 1.0 or not 0.0 < self.power < 1.0:
            raise ConfigError(f"kappa must be in [0, 1) and power in (0, 1), got {self.kappa}, {self.power}")

    @classmethod
    def for_family(cls, looks: Sequence[int], family_alpha: float, comparisons: int) -> GroupSequential:
        """The design of each of ``comparisons`` comparisons at its Bonferroni share."""
        return cls(looks=tuple(looks), alpha=family_alpha / max(1, comparisons))

    @property
    def fractions(self) -> np.ndarray:
        return np.asarray(self.looks, dtype=np.float64) / self.looks[-1]

    @property
    def efficacy(self) -> np.ndarray:
        """c_k: |z_k| >= c_k settles the verdict at look k."""
        return efficacy_bounds(self.fractions, self.alpha, self.spending)

    @property
    def futility(self) -> np.ndarray:
        """f_k for the looks before the last: |z_k| < f_k stops for futility (module docstring)."""
        t = self.fractions[:-1]
        theta = dist.norm.isf(self.alpha / 2.0) + dist.norm.ppf(self.power)
        gamma = self.kappa * np.sqrt(1.0 - t)
        # CP_k(f) = gamma: sqrt(t) f + theta (1 - t) - c_K = sqrt(1 - t) Phi^-1(gamma); gamma 0 (no
        # futility) gives f = -inf, floored at 0.
        quantile = dist.norm.ppf(gamma)
        f = (self.efficacy[-1] - theta * (1.0 - t) + np.sqrt(1.0 - t) * quantile) / np.sqrt(t)
        return np.asarray(np.maximum(f, 0.0))

    def conditional_power(self, look: int, z: float) -> float:
        """CP_k(z) at the design alternative (module docstring); ``look`` 0-based, before the last."""
        t = float(self.fractions[look])
        theta = dist.norm.isf(self.alpha / 2.0) + dist.norm.ppf(self.power)
        return float(special.ndtr((math.sqrt(t) * abs(z) + theta * (1.0 - t) - self.efficacy[-1])
                                  / math.sqrt(1.0 - t)))

    def decide(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised rule over the looks observed so far: ``z`` has shape (..., k), k <= K, z[..., j]
        the signed score of look j. Returns (stop codes, round index 0-based) of shape (...): the
        code is an index into ``CODES``; OPEN comparisons carry the last observed look."""
        z = np.asarray(z, dtype=np.float64)
        k = z.shape[-1]
        if not 1 <= k <= len(self.looks):
            raise ConfigError(f"z has {k} looks; the design has {len(self.looks)}")
        c, f = self.efficacy, self.futility
        code = np.full(z.shape[:-1], CODES.index(Stop.OPEN))
        where = np.full(z.shape[:-1], k - 1)
        open_ = np.ones(z.shape[:-1], dtype=bool)
        for j in range(k):
            zj = z[..., j]
            for stop, hit in ((Stop.BETTER, zj >= c[j]), (Stop.WORSE, zj <= -c[j])):
                now = open_ & hit
                code[now], where[now] = CODES.index(stop), j
                open_ &= ~now
            if j < len(self.looks) - 1:
                now = open_ & (np.abs(zj) < f[j])
                code[now], where[now] = CODES.index(Stop.FUTILITY), j
            else:
                now = open_.copy()
                code[now], where[now] = CODES.index(Stop.MAX), j
            open_ &= ~now
        return code, where

    def verdict(self, z: Sequence[float]) -> Verdict:
        """The rule for one comparison whose looks so far gave ``z`` (one signed score per round)."""
        code, where = self.decide(np.asarray([list(z)], dtype=np.float64))
        j = int(where[0])
        return Verdict(stop=CODES[int(code[0])], round=j + 1, seeds=self.looks[j], z=float(z[j]))


CODES: tuple[Stop, ...] = tuple(Stop)


def signed_z(mean: np.ndarray | float, p_value: np.ndarray | float) -> np.ndarray:
    """z = sign(mean) Phi^-1(1 - p / 2): a two-sided p-value as a signed normal score (p = 0 gives
    +-inf, p = 1 gives 0)."""
    p = np.clip(np.asarray(p_value, dtype=np.float64), 0.0, 1.0)
    return np.asarray(np.sign(mean) * dist.norm.isf(p / 2.0))
