"""Cascade Transformer plan and cost accounting (Soldaini & Moschitti 2020, Sections 4.2, 4.3.2, 5.4).

Pure arithmetic: no torch, no numpy. A ``CascadePlan`` fixes the encoder depth ``n``, the exits
rho(1) < ... < rho(N) = n (1-based layers) and one drop ratio alpha_i per exit.

Drop rule (Sec. 4.3.2). The k_{i-1} candidates that reach exit i are scored by its classifier and
the d_i lowest-scored are dropped, d_i = floor(alpha_i * k_{i-1}), k_i = k_{i-1} - d_i; the
survivors go on through layers rho(i)+1 .. rho(i+1). The last exit's alpha drops nothing that
matters: no layer follows it, and the final ranking orders its candidates by its own score anyway.

Relative cost per batch (Sec. 4.3.2, the "average batch size" over the batch size; Table 3)::

    cost = sum_{i=1..N} (rho(i) - rho(i-1)) * k_{i-1} / (n * k_0),   rho(0) = 0

Example (paper, alpha = 0.5, 128 candidates, exits 4,6,8,10,12 of 12 layers): k = 128, 64, 32,
16, 8 and cost = (4*128 + 2*64 + 2*32 + 2*16 + 2*8) / (12*128) = 0.490, a 51% cost reduction.

Rounding. The paper states floor, which gives reductions 36.7%, 44.4%, 51.0% at alpha = 0.3,
0.4, 0.5; Table 3 reports 37%, 45%, 51%. Its worked example (128 -> 90 -> 63 -> 44 -> 31 at
alpha = 0.3) drops 19 of 63, i.e. rounds alpha * k to the nearest integer, which also gives
44.8% -> 45% at alpha = 0.4. ``rounding="floor"`` (default) follows the stated formula,
``rounding="nearest"`` (halves up) reproduces the paper's printed numbers.

>>> plan = CascadePlan.build(num_layers=12, exits=(4, 6, 8, 10, 12), alpha=(0.3,))
>>> plan.entering(128), round(plan.relative_cost(128), 4)
((128, 90, 63, 45, 32), 0.6328)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from harness.config import CASCADE_ROUNDINGS, alpha_count_problem
from harness.errors import ConfigError

if TYPE_CHECKING:
    from harness.config import CascadeConfig

Rounding = Literal["floor", "nearest"]
ROUNDINGS: tuple[Rounding, ...] = CASCADE_ROUNDINGS  # the config key cascade.rounding's values
# Paper's rho(i) = 4 + 2(i - 1) on 12 layers = depth * (2, 3, 4, 5, 6) / 6; other depths scale it.
_EXIT_SIXTHS = (2, 3, 4, 5, 6)


def default_exits(num_layers: int) -> tuple[int, ...]:
    """Exits for a depth: ceil(n * j / 6) for j = 2..6, deduplicated (the paper's 4,6,8,10,12 at
    n = 12, scaled). The paper finds layers below a third of the depth too unstructured to rank.

    >>> default_exits(12), default_exits(6), default_exits(4), default_exits(24)
    ((4, 6, 8, 10, 12), (2, 3, 4, 5, 6), (2, 3, 4), (8, 12, 16, 20, 24))
    """
    _check_depth(num_layers)
    return tuple(sorted({-(-num_layers * j // 6) for j in _EXIT_SIXTHS}))


def drop_count(alpha: float, k: int, rounding: Rounding = "floor") -> int:
    """Candidates an exit drops out of the ``k`` that reached it: floor(alpha * k) (or nearest).

    Computed in decimal from the float's shortest repr, so 0.29 * 100 drops 29, not 28.

    >>> drop_count(0.3, 128), drop_count(0.3, 63), drop_count(0.3, 63, "nearest")
    (38, 18, 19)
    """
    if rounding not in ROUNDINGS:
        raise ConfigError(f"cascade rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    exact = Decimal(repr(float(alpha))) * k
    return int(exact + Decimal("0.5")) if rounding == "nearest" else int(exact)


@dataclass(frozen=True, kw_only=True)
class CascadePlan:
    """Depth, exits (1-based layers, the last one = depth) and one alpha per exit, validated."""

    num_layers: int
    exits: tuple[int, ...]
    alphas: tuple[float, ...]
    rounding: Rounding = "floor"

    def __post_init__(self) -> None:
        _check_depth(self.num_layers)
        check_exits(self.exits, self.num_layers)
        _check_alphas(self.alphas)
        if len(self.alphas) != len(self.exits):
            raise ConfigError(f"cascade.alpha must have one value per exit after expansion "
                              f"({len(self.exits)}), got {len(self.alphas)}")
        if self.rounding not in ROUNDINGS:
            raise ConfigError(f"cascade rounding must be one of {', '.join(ROUNDINGS)}, "
                              f"got {self.rounding!r}")

    @classmethod
    def build(cls, *, num_layers: int, exits: Sequence[int] | None = None,
              alpha: Sequence[float] = (0.0,), rounding: Rounding = "floor") -> CascadePlan:
        """A plan from user-facing values: ``exits`` None = ``default_exits(num_layers)``; ``alpha``
        one value for every exit, one per exit before the last, or one per exit with 0 last."""
        _check_depth(num_layers)
        chosen = default_exits(num_layers) if exits is None else tuple(int(e) for e in exits)
        check_exits(chosen, num_layers)
        alphas = tuple(float(a) for a in alpha)
        _check_alphas(alphas)
        problem = alpha_count_problem(alphas, len(chosen), f"cascade.exits={list(chosen)}")
        if problem:
            raise ConfigError(problem)
        if len(alphas) == 1:
            alphas = alphas * len(chosen)
        elif len(alphas) == len(chosen) - 1:  # the paper's form: the final exit drops nothing
            alphas = (*alphas, 0.0)
        return cls(num_layers=num_layers, exits=chosen, alphas=alphas, rounding=rounding)

    def drops(self, i: int, k: int) -> int:
        """Candidates exit ``i`` (0-based) drops out of the ``k`` it scored; the last exit drops none,
        and one candidate always goes on (only ``nearest`` rounding could otherwise drop all)."""
        if i == len(self.exits) - 1 or k <= 1:
            return 0
        return min(drop_count(self.alphas[i], k, self.rounding), k - 1)

    def entering(self, n: int) -> tuple[int, ...]:
        """k_0 .. k_{N-1}: candidates scored by each exit (entering the segment that ends at it)."""
        _check_batch(n)
        out, k = [], n
        for i in range(len(self.exits)):
            out.append(k)
            k -= self.drops(i, k)
        return tuple(out)

    def layer_passes(self, n: int) -> int:
        """Candidate-layer passes for a batch of ``n``: sum_i (rho(i) - rho(i-1)) * k_{i-1}."""
        starts = (0, *self.exits[:-1])
        return sum((stop - start) * k for start, stop, k in zip(starts, self.exits, self.entering(n),
                                                                  strict=True))

    def relative_cost(self, n: int) -> float:
        """Cost of a batch of ``n`` relative to the full model on all of it (1.0 when nothing is dropped)."""
        return self.layer_passes(n) / (self.num_layers * n)

    def speedup(self, n: int) -> float:
        """Predicted speed-up over the full model: 1 / relative cost."""
        return 1.0 / self.relative_cost(n)

    def with_alpha(self, alpha: Sequence[float]) -> CascadePlan:
        """The same depth and exits with other drop ratios (as ``build`` takes them)."""
        return CascadePlan.build(num_layers=self.num_layers, exits=self.exits, alpha=alpha,
                                 rounding=self.rounding)


def plan_from_config(cfg: CascadeConfig, num_layers: int) -> CascadePlan:
    """The plan of a validated ``CascadeConfig`` on an encoder of ``num_layers`` layers; the depth
    checks (exits within it, last exit = depth) happen here, where the depth is known."""
    return CascadePlan.build(num_layers=num_layers, exits=cfg.exits, alpha=cfg.alpha,
                             rounding=cfg.rounding)  # validated by the config


def cost_table(plan: CascadePlan, n: int) -> str:
    """A plain-text table: candidates scored and dropped at each exit, then the relative cost.

    >>> print(cost_table(CascadePlan.build(num_layers=6, exits=(3, 6), alpha=(0.5,)), 10))
    exit  layer  alpha  scored  dropped  survivors
       1      3   0.50      10        5          5
       2      6      -       5        -          5
    candidate-layer passes 45 of 60: relative cost 0.7500, cost reduction 25.0%, predicted speed-up 1.33x
    """
    last = len(plan.exits) - 1
    alphas = ["-" if i == last else _alpha_text(a) for i, a in enumerate(plan.alphas)]
    width = max(5, *map(len, alphas))
    lines = [f"exit  layer  {'alpha':>{width}}  scored  dropped  survivors"]
    for i, (layer, k) in enumerate(zip(plan.exits, plan.entering(n), strict=True)):
        d = plan.drops(i, k)
        dropped = "-" if i == last else str(d)
        lines.append(f"{i + 1:>4}  {layer:>5}  {alphas[i]:>{width}}  {k:>6}  {dropped:>7}  {k - d:>9}")
    cost = plan.relative_cost(n)
    lines.append(f"candidate-layer passes {plan.layer_passes(n)} of {plan.num_layers * n}: relative cost "
                 f"{cost:.4f}, cost reduction {100 * (1 - cost):.1f}%, predicted speed-up {1 / cost:.2f}x")
    return "\n".join(lines)


def _alpha_text(alpha: float) -> str:
    """A drop ratio as given: two decimals where they say it exactly (0.30, as the paper prints it),
    else its shortest exact form (0.999, 0.004), never rounded to another ratio.

    >>> _alpha_text(0.3), _alpha_text(0.999), _alpha_text(0.004)
    ('0.30', '0.999', '0.004')
    """
    two = f"{alpha:.2f}"
    return two if float(two) == alpha else repr(float(alpha))


def _check_depth(num_layers: int) -> None:
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ConfigError(f"encoder depth (number of layers) must be an integer >= 1, got {num_layers!r}")


def _check_batch(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"cascade batch (candidates per query) must be an integer >= 1, got {n!r}")


def check_exits(exits: tuple[int, ...], num_layers: int) -> None:
    """The trainer's rule for ``cascade.exits`` of a ``num_layers``-layer encoder: layers in
    [1, num_layers], strictly increasing, the last one the last layer (the full model)."""
    shown = list(exits)
    if not exits:
        raise ConfigError("cascade.exits must be a non-empty list of layers")
    if shown != sorted(set(shown)):
        raise ConfigError(f"cascade.exits must be strictly increasing, got {shown}")
    beyond = [e for e in exits if not 1 <= e <= num_layers]
    if beyond:
        raise ConfigError(f"cascade.exits must be layers in [1, {num_layers}] of this {num_layers}-layer "
                          f"encoder, got {shown} ({beyond[0]} is beyond its depth)"
                          if beyond[0] > num_layers else
                          f"cascade.exits must be layers in [1, {num_layers}], got {shown}")
    if exits[-1] != num_layers:
        raise ConfigError(f"cascade.exits must end at the last layer ({num_layers}) so that the final "
                          f"exit is the full model, got {shown}")


def _check_alphas(alphas: tuple[float, ...]) -> None:
    for a in alphas:
        if not 0.0 <= a < 1.0:  # also refuses NaN
            raise ConfigError(f"cascade.alpha must be in [0, 1) for every exit, got {list(alphas)}")
