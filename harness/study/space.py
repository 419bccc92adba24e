"""Search spaces are data: one ``Param`` per flat dotted key, with optional conditions.

Distributions (YAML)::

    curriculum.scoring: {choice: [random, bert_pred]}
    curriculum.delta:   {uniform: [0.1, 0.9]}
    smoothing.epsilon:  {loguniform: [0.01, 0.4]}
    curriculum.n:       {int: [1, 10], when: {curriculum.pacing: root_n}}
    cascade.alpha:      {fixed: [0.3]}

``when`` makes a key conditional: it is suggested only when every named key (suggested earlier, or a
default) has the given value (or one of a list of values).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError, shown

KINDS = ("choice", "uniform", "loguniform", "int", "fixed")


@dataclass(frozen=True)
class Param:
    key: str
    kind: str
    args: tuple[Any, ...]
    when: Mapping[str, tuple[Any, ...]]

    @property
    def discrete(self) -> bool:
        return self.kind in ("choice", "fixed", "int")

    @property
    def count(self) -> int:
        """How many values a discrete kind takes (``values`` without listing them); 0 for a
        continuous one."""
        if self.kind == "int":
            return max(0, int(self.args[1]) - int(self.args[0]) + 1)
        return len(self.args) if self.kind == "choice" else 1 if self.kind == "fixed" else 0

    def values(self) -> list[Any]:
        """Every value for discrete kinds; the bounds for continuous ones (for validation)."""
        if self.kind == "choice":
            return list(self.args)
        if self.kind == "fixed":
            return [self.args[0]]
        if self.kind == "int":
            lo, hi = self.args
            return list(range(int(lo), int(hi) + 1))
        return list(self.args)

    def active(self, point: Mapping[str, Any]) -> bool:
        return all(point.get(k) in vals for k, vals in self.when.items())


def parse_param(key: str, spec: Any) -> Param:
    if not isinstance(spec, dict):
        raise ConfigError(f"search.space.{key}: expected one of {', '.join(KINDS)}, e.g. "
                          f"{{choice: [a, b]}}, got {shown(spec)}", key=f"search.space.{key}")
    kinds = [k for k in spec if k in KINDS]
    extra = set(spec) - set(KINDS) - {"when"}
    if len(kinds) != 1 or extra:
        raise ConfigError(f"search.space.{key}: give exactly one of {', '.join(KINDS)} "
                          f"(plus optional when), got {sorted(spec)}", key=f"search.space.{key}")
    kind = kinds[0]
    raw = spec[kind]
    when_raw = spec.get("when") or {}
    if not isinstance(when_raw, dict):
        raise ConfigError(f"search.space.{key}.when must map keys to values", key=f"search.space.{key}")
    when = {str(k): tuple(v) if isinstance(v, list) else (v,) for k, v in when_raw.items()}
    if kind == "fixed":
        return Param(key, kind, (raw,), when)
    if kind == "choice":
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"search.space.{key}.choice must be a non-empty list", key=f"search.space.{key}")
        return Param(key, kind, tuple(raw), when)
    if not (isinstance(raw, list) and len(raw) == 2):
        raise ConfigError(f"search.space.{key}.{kind} must be [low, high], got {shown(raw)}", key=f"search.space.{key}")
    lo, hi = raw
    if isinstance(lo, bool) or isinstance(hi, bool):
        raise ConfigError(f"search.space.{key}.{kind} bounds must be numbers, got {shown(raw)}", key=f"search.space.{key}")
    if kind == "int" and not (isinstance(lo, int) and isinstance(hi, int)):
        raise ConfigError(f"search.space.{key}.int bounds must be integers, got {shown(raw)}", key=f"search.space.{key}")
    try:  # an int range compares its integers (a float has none for 10**400: the key's check says so)
        lo_f, hi_f = (lo, hi) if kind == "int" else (float(lo), float(hi))
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of 400 digits
        raise ConfigError(f"search.space.{key}.{kind} bounds must be numbers, got {shown(raw)}", key=f"search.space.{key}") from None
    if not lo_f < hi_f:
        raise ConfigError(f"search.space.{key}.{kind} needs low < high, got {shown(raw)}", key=f"search.space.{key}")
    if kind == "loguniform" and lo_f <= 0:
        raise ConfigError(f"search.space.{key}.loguniform needs low > 0, got {shown(raw)}", key=f"search.space.{key}")
    return Param(key, kind, (lo, hi), when)


def ordered(space: Mapping[str, Param]) -> list[Param]:
    """Keys in an order where every condition's key comes first."""
    done: list[Param] = []
    seen: set[str] = set()
    pending = list(space.values())
    while pending:
        ready = [p for p in pending if all(k in seen or k not in space for k in p.when)]
        if not ready:
            raise ConfigError("search.space: conditions form a cycle: "
                              + ", ".join(p.key for p in pending), key="search.space")
        for p in ready:
            done.append(p)
            seen.add(p.key)
            pending.remove(p)
    return done


def suggest(trial: Any, space: Mapping[str, Param], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Define-by-run for Optuna: suggestions only: the search space is data, and the function computes nothing else. Returns the active keys' values."""
    point: dict[str, Any] = dict(defaults)
    out: dict[str, Any] = {}
    for p in ordered(space):
        if not p.active(point):
            continue
        if p.kind == "fixed":
            value = p.args[0]
        elif p.kind == "choice":
            value = trial.suggest_categorical(p.key, list(p.args))
        elif p.kind == "int":
            value = trial.suggest_int(p.key, int(p.args[0]), int(p.args[1]))
        else:
            value = trial.suggest_float(p.key, float(p.args[0]), float(p.args[1]),
                                        log=p.kind == "loguniform")
        point[p.key] = value
        out[p.key] = value
    return out


def enumerate_grid(space: Mapping[str, Param], defaults: Mapping[str, Any] | None = None
                   ) -> Iterator[dict[str, Any]]:
    """Every combination of the discrete values, conditional keys only where active."""
    params = ordered(space)

    def rec(i: int, point: dict[str, Any], out: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(params):
            yield dict(out)
            return
        p = params[i]
        if not p.active(point):
            yield from rec(i + 1, point, out)
            return
        for v in p.values():
            yield from rec(i + 1, {**point, p.key: v}, {**out, p.key: v})

    seen: set[tuple[tuple[str, str], ...]] = set()
    for point in rec(0, dict(defaults or {}), {}):
        key = tuple(sorted((k, repr(v)) for k, v in point.items()))
        if key not in seen:
            seen.add(key)
            yield point


def grid_bound(params: Iterable[Param]) -> int:
    """At most how many points ``enumerate_grid`` yields: the product of each discrete key's value
    count (a conditional key counts as always active), computed without enumerating."""
    return math.prod(max(1, p.count) for p in params)


def grid_size(space: Mapping[str, Param]) -> int:
    return sum(1 for _ in enumerate_grid(space))

