"""Early stopping over configurations, not trials: successive halving on seed-group means.

Pure bookkeeping and decisions (no Ray); ``harness.driver._early_stop_ray`` feeds it Tune results.

Settings (study file ``early_stopping``, off by default)::

    early_stopping: {rungs: [0.25, 0.5], reduction_factor: 2, metric: map}

- A **rung** is a point in training: a fraction in (0, 1) of a configuration's ``train.steps``, or
  a whole number of steps. A trial *reaches* a rung at its first dev evaluation at or after the rung's
  step; the dev metric of that evaluation is its **rung value**. Rung values are kept by the rung
  (0.5), not by its step: configurations of different lengths (a configuration that sets
  ``train.steps``, a search over it) reach rung 0.5 at different steps and are compared there, at
  the same fraction of their own training.
- A configuration's **group mean** at a rung is the mean of the rung values of its seeds that have
  reached the rung so far (seeds still running before the rung, or not started, do not count).
- **Decision** (asynchronous successive halving, ASHA-like, on group means): every time a seed of a
  configuration reaches a rung, the configurations with a group mean at that rung are ranked
  (best first by the metric's mode; the baseline takes part as a reference). With ``n`` of them,
  the top ``ceil(n / reduction_factor)`` continue; the configuration is stopped if it ranks below
  them. A configuration is never judged while fewer than ``max(reduction_factor, min_groups)``
  configurations have a value at the rung (``min_groups``: the number of fixed configurations of
  the study, so the fixed ones are all in before any is judged; a searcher's proposals are judged
  against the fixed ones' values, which are kept). Ties keep the configuration.
- **Over several collections** (docs/study-file.md, "Collections") each (configuration, collection)
  is a configuration of its own, and a rung ranks only the configurations of the same collection,
  on that collection's dev metric (``min_groups``: the fixed configurations of one collection).
- The **baseline is never stopped**; a stopped configuration stays stopped (the state is saved as
  JSON on the study's storage path and read back on ``--resume``), and all its seeds stop: running
  ones at their next report, pending ones before they start.
- **Steps saved**: for every seed of a stopped configuration, its ``train.steps`` minus the steps
  it had run when stopped (all of them for a seed that never started).
- **Value for a searcher**: a stopped configuration reports to Optuna its group mean of the metric
  at the rung where it was stopped (with a searcher the metric must be the study's objective).

>>> s = EarlyStopSettings(rungs=(0.25, 0.5), reduction_factor=2, metric="map", mode="max")
>>> rung_steps(s, steps=80, eval_every=10)
(20, 40)
>>> st = EarlyStopState(s, min_groups=3)
>>> st.observe("base", "baseline", seed=1, step=20, value=0.40, total_steps=80, baseline=True)
>>> st.observe("good", "good", seed=1, step=20, value=0.45, total_steps=80)
>>> st.observe("bad", "bad", seed=1, step=20, value=0.05, total_steps=80) is not None
True
>>> st.stopped["bad"].rung, st.stopped["bad"].point, round(st.stopped["bad"].value, 2)
(20, 0.25, 0.05)

The state is JSON (``to_json``; ``from_json`` reads it back on ``--resume``). It lies on the study's
storage path, which may be shared, so ``from_json`` checks all of it (every key, type and number) and
refuses anything else in one line (``StateError``) naming the file and the field: a damaged or
planted file stops the resume as a refusal, never as a traceback, and is never half-read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

# 2: rung values kept by the rung (its repr: "0.5", "20.0"); 1 (read, converted): by the step read
STATE_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class EarlyStopSettings:
    rungs: tuple[float, ...]
    reduction_factor: float
    metric: str
    mode: str = "max"


def rung_step(rung: float, steps: int) -> int:
    """The training step of a rung: a fraction of ``steps`` (rounded up) or a whole step count."""
    if 0 < rung < 1:
        return max(1, math.ceil(rung * steps))
    return int(rung)


def rung_steps(settings: EarlyStopSettings, steps: int, eval_every: int) -> tuple[int, ...]:
    """The rungs of a configuration as the steps of the dev evaluations where they are read:
    the first evaluation at or after each rung's step (evaluations every ``eval_every`` steps and at
    the last step). A rung read only at the last step stops nothing and is left out."""
    out: list[int] = []
    for r in settings.rungs:
        s = rung_step(r, steps)
        at = min(steps, -(-s // eval_every) * eval_every)
        if at < steps and at not in out:
            out.append(at)
    return tuple(out)


def rungs_at(settings: EarlyStopSettings, steps: int, eval_every: int, step: int) -> tuple[float, ...]:
    """The rungs a configuration of ``steps`` steps (dev evaluations every ``eval_every``) reads at
    the evaluation of ``step`` (two rungs whose first evaluation is the same one are both read there).

    >>> s = EarlyStopSettings(rungs=(0.5,), reduction_factor=2, metric="map")
    >>> rungs_at(s, 6, 3, 3), rungs_at(s, 12, 3, 6), rungs_at(s, 12, 3, 3)
    ((0.5,), (0.5,), ())
    """
    out = []
    for r in settings.rungs:
        at = min(steps, -(-rung_step(r, steps) // eval_every) * eval_every)
        if at == step < steps:
            out.append(r)
    return tuple(out)


def rung_of(settings: EarlyStopSettings, step: int, steps: int) -> float | None:
    """The rung a value read at ``step`` of a ``steps``-step configuration belongs to: the last rung
    whose step is at or before it (None: before the first). For callers that know a reading's step
    but not the evaluation schedule (a state of version 1 kept rung values by step)."""
    before = [r for r in settings.rungs if rung_step(r, steps) <= step]
    return before[-1] if before else None


def rung_key(rung: float) -> str:
    """A rung as a key of the state (its exact float repr: ``0.5`` -> ``"0.5"``, 20 -> ``"20.0"``)."""
    return repr(float(rung))


def keep_count(n: int, reduction_factor: float) -> int:
    """How many of ``n`` configurations at a rung continue: the top ceil(n / eta).

    >>> [keep_count(n, 2) for n in (1, 2, 3, 4, 5)], [keep_count(n, 3) for n in (3, 4, 6, 7)]
    ([1, 1, 2, 2, 3], [1, 2, 2, 3])
    """
    return max(1, math.ceil(n / reduction_factor - 1e-12))


@dataclass
class Stopped:
    """Why a configuration was stopped: at which rung (``rung``: the step where this configuration
    read it, as tags and tables show; ``point``: the rung as the study file gives it, None in a state
    of version 1), its group mean there (the value a searcher gets), its rank and a sentence."""

    name: str
    rung: int
    value: float
    rank: int
    groups: int
    keep: int
    reason: str
    point: float | None = None


@dataclass
class _Group:
    name: str
    baseline: bool = False
    total_steps: int = 0
    collection: str = ""  # a study over several collections: a rung ranks its own collection's
    values: dict[str, dict[str, float]] = field(default_factory=dict)  # rung_key(rung) -> seed -> value
    progress: dict[str, int] = field(default_factory=dict)  # seed -> last step seen


class EarlyStopState:
    """Rung values of every configuration and the stopped ones; JSON round-trip for ``--resume``."""

    def __init__(self, settings: EarlyStopSettings, min_groups: int = 1) -> None:
        self.settings = settings
        self.min_groups = min_groups
        self.groups: dict[str, _Group] = {}
        self.stopped: dict[str, Stopped] = {}

    # -- observations -------------------------------------------------------------------------

    def group(self, config_id: str, name: str, *, total_steps: int = 0, baseline: bool = False,
              collection: str = "") -> _Group:
        g = self.groups.get(config_id)
        if g is None:
            g = self.groups[config_id] = _Group(name=name, baseline=baseline, total_steps=total_steps,
                                                collection=collection)
        g.baseline = g.baseline or baseline
        g.total_steps = total_steps or g.total_steps
        return g

    def progress(self, config_id: str, name: str, seed: int, step: int, *, total_steps: int,
                 baseline: bool = False, collection: str = "") -> None:
        """Record that a seed has run ``step`` steps (for the steps-saved count)."""
        g = self.group(config_id, name, total_steps=total_steps, baseline=baseline, collection=collection)
        g.progress[str(seed)] = max(step, g.progress.get(str(seed), 0))

    def observe(self, config_id: str, name: str, *, seed: int, step: int, value: float, total_steps: int,
                baseline: bool = False, collection: str = "", rung: float | None = None) -> Stopped | None:
        """A seed's rung value read at ``step``; returns the decision when this stops its configuration."""
        return self.observe_seeds(config_id, name, {seed: value}, step=step, total_steps=total_steps,
                                  baseline=baseline, collection=collection, rung=rung)

    def observe_seeds(self, config_id: str, name: str, values: dict[int, float], *, step: int, total_steps: int,
                      baseline: bool = False, collection: str = "", rung: float | None = None) -> Stopped | None:
        """Several seeds' rung values read at ``step`` at once (a trial that trains a configuration's
        seeds together reports them together): all are recorded under ``rung`` (default: the last
        rung at or before ``step`` of ``total_steps``), then the configuration is judged once at that
        rung; returns the decision when this stops it. A value that is not finite counts as none."""
        for seed in values:
            self.progress(config_id, name, seed, step, total_steps=total_steps, baseline=baseline,
                          collection=collection)
        if rung is None:
            rung = rung_of(self.settings, step, total_steps)
            if rung is None:
                return None
        g = self.groups[config_id]
        for seed, value in values.items():
            if math.isfinite(value):
                g.values.setdefault(rung_key(rung), {})[str(seed)] = float(value)
        if config_id in self.stopped:
            return None
        decision = self.decide(config_id, rung, step)
        if decision is not None:
            self.stopped[config_id] = decision
        return decision

    def means(self, rung: float, collection: str | None = None) -> dict[str, float]:
        """Group means at ``rung`` over the seeds that reached it (of one ``collection``'s
        configurations; None: every configuration), whatever step each read it at."""
        out = {}
        for cid, g in self.groups.items():
            if collection is not None and g.collection != collection:
                continue
            vals = [v for v in g.values.get(rung_key(rung), {}).values() if math.isfinite(v)]
            if vals:
                out[cid] = sum(vals) / len(vals)
        return out

    def decide(self, config_id: str, rung: float, step: int) -> Stopped | None:
        """Successive halving at ``rung`` (read at ``step`` by this configuration) for one
        configuration (module docstring)."""
        g = self.groups[config_id]
        means = self.means(rung, g.collection)
        if g.baseline or config_id not in means:
            return None
        eta = self.settings.reduction_factor
        n = len(means)
        if n < max(eta, self.min_groups):
            return None
        sign = 1.0 if self.settings.mode == "max" else -1.0
        mine = means[config_id]
        rank = 1 + sum(1 for v in means.values() if sign * v > sign * mine)  # ties share the better rank
        keep = keep_count(n, eta)
        if rank <= keep:
            return None
        where = f"rung {rung:g} (step {step} of {g.total_steps})" if 0 < rung < 1 else f"step {step}"
        reason = (f"{self.settings.metric} {mine:.4f} (mean of {len(g.values[rung_key(rung)])} seed(s)) ranks "
                  f"{rank} of {n} configurations{f' on {g.collection}' if g.collection else ''} at {where}; "
                  f"the top {keep} continue (reduction factor {eta:g})")
        return Stopped(name=g.name, rung=step, value=mine, rank=rank, groups=n, keep=keep, reason=reason,
                       point=float(rung))

    # -- queries ------------------------------------------------------------------------------

    def is_stopped(self, config_id: str) -> bool:
        return config_id in self.stopped

    def steps_saved(self, seeds: int) -> int:
        """Trial-steps not run because their configuration was stopped (``seeds`` per configuration)."""
        total = 0
        for cid in self.stopped:
            g = self.groups[cid]
            ran = sum(g.progress.values())
            total += max(0, g.total_steps * seeds - ran)
        return total

    def steps_run(self) -> int:
        """Trial-steps run so far, as far as the state has seen (last reported step of every seed)."""
        return sum(sum(g.progress.values()) for g in self.groups.values())

    # -- persistence --------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps({
            "version": STATE_VERSION, "settings": asdict(self.settings), "min_groups": self.min_groups,
            "groups": {cid: asdict(g) for cid, g in self.groups.items()},
            "stopped": {cid: asdict(s) for cid, s in self.stopped.items()}}, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, settings: EarlyStopSettings | None = None, *,
                  source: str = "early stopping state") -> EarlyStopState:
        """The saved state; ``settings`` (the study file's, which may have changed) win over the
        saved ones for decisions still to come, while the stopped configurations stay stopped.
        Anything but a state this harness writes (of version 1 or 2) is refused: ``StateError``,
        one line naming ``source`` (the file) and the field (module docstring)."""
        try:
            raw = json.loads(text)
        except RecursionError:
            raise StateError(f"{source}: not JSON (nested too deeply)") from None
        except ValueError as exc:
            raise StateError(f"{source}: not JSON ({str(exc).splitlines()[0][:200]})") from None
        return _read_state(cls, raw, settings, source)

    @classmethod
    def load(cls, path: str | Path, settings: EarlyStopSettings, min_groups: int = 1) -> EarlyStopState:
        p = Path(path)
        if p.is_file():
            try:
                text = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise not_utf8(f"early stopping state {p}") from None
            st = cls.from_json(text, settings, source=f"early stopping state {p}")
            st.min_groups = min_groups
            return st
        return cls(settings, min_groups)

    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(p)


# -- reading a saved state: every field checked --------------------------------------------------

class StateError(HarnessError):
    """A saved early-stopping state that is no state this harness writes (damaged, truncated,
    planted, or from a newer harness): refused in one line naming the file and the field."""


# What every refusal of a saved state adds: what it is, and the two ways on.
NOT_OURS = ("not a state this harness wrote (damaged or planted): restore the file the study's driver wrote, "
            "or delete it to resume without early stopping's earlier decisions (docs/reliability.md)")


def not_utf8(source: str) -> StateError:
    """The refusal of a state file ``source`` whose bytes are no UTF-8 text."""
    return StateError(f"{source}: not JSON (not UTF-8 text); {NOT_OURS}")


def _read_state(cls: type[EarlyStopState], raw: Any, settings: EarlyStopSettings | None,
                source: str) -> EarlyStopState:
    def bad(where: str, what: str) -> StateError:
        return StateError(f"{source}: {where}: {what}; {NOT_OURS}")

    def obj(v: Any, where: str, keys: Collection[str], optional: Collection[str] = ()) -> Mapping[str, Any]:
        if not isinstance(v, dict):
            raise bad(where, f"expected an object, got {_kind(v)}")
        missing = sorted(set(keys) - set(v))
        if missing:
            raise bad(where, f"missing key {missing[0]!r}")
        extra = sorted(set(v) - set(keys) - set(optional))
        if extra:
            raise bad(where, f"unknown key {extra[0][:60]!r}")
        return v

    def string(v: Any, where: str) -> str:
        if not isinstance(v, str):
            raise bad(where, f"expected a string, got {_kind(v)}")
        return v

    def integer(v: Any, where: str, low: int = 0) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise bad(where, f"expected a whole number >= {low}, got {_shown(v)}")
        return v

    def number(v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise bad(where, f"expected a finite number, got {_shown(v)}")
        return float(v)

    def boolean(v: Any, where: str) -> bool:
        if not isinstance(v, bool):
            raise bad(where, f"expected true or false, got {_shown(v)}")
        return v

    def table(v: Any, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise bad(where, f"expected an object, got {_kind(v)}")
        return v

    def seed(k: str, where: str) -> str:
        if not k.lstrip("-").isdigit() or len(k) > 20:
            raise bad(where, f"{k[:60]!r} is no seed")
        return k

    top = obj(raw, "the file", {"version", "settings", "groups", "stopped"}, {"min_groups"})
    version = top["version"]
    if isinstance(version, bool) or version not in (1, 2):
        raise bad("version", f"{_shown(version)} (this harness reads 1 and 2)")
    s = obj(top["settings"], "settings", {"rungs", "reduction_factor", "metric", "mode"})
    if not isinstance(s["rungs"], list) or not s["rungs"]:
        raise bad("settings.rungs", f"expected a non-empty list, got {_shown(s['rungs'])}")
    rungs = tuple(number(r, f"settings.rungs[{i}]") for i, r in enumerate(s["rungs"]))
    if any(r <= 0 for r in rungs):
        raise bad("settings.rungs", "a rung is a fraction in (0, 1) or a step count")
    saved = EarlyStopSettings(rungs=rungs, reduction_factor=number(s["reduction_factor"], "settings.reduction_factor"),
                              metric=string(s["metric"], "settings.metric"), mode=string(s["mode"], "settings.mode"))
    if saved.mode not in ("max", "min"):
        raise bad("settings.mode", f"expected max or min, got {_shown(saved.mode)}")
    st = cls(settings or saved, min_groups=integer(top.get("min_groups", 1), "min_groups", 1))
    for cid, g in table(top["groups"], "groups").items():
        at = f"groups.{cid[:60]}"
        g = obj(g, at, {"name", "baseline", "total_steps", "collection", "values", "progress"})
        total = integer(g["total_steps"], f"{at}.total_steps")
        values: dict[str, dict[str, float]] = {}
        for key, seeds in table(g["values"], f"{at}.values").items():
            where = f"{at}.values.{key[:60]}"
            if version == 1:  # kept by the step read: the rung of that step
                if not key.isdigit() or len(key) > 20:
                    raise bad(where, f"{key[:60]!r} is no step")
                rung = rung_of(saved, int(key), total)
            else:
                try:
                    rung = float(key)
                except ValueError:
                    raise bad(where, f"{key[:60]!r} is no rung") from None
                if not math.isfinite(rung) or rung <= 0 or rung_key(rung) != key:
                    raise bad(where, f"{key[:60]!r} is no rung")
            row = {seed(k, where): number(v, f"{where}.{k}") for k, v in table(seeds, where).items()}
            if rung is not None:
                values.setdefault(rung_key(rung), {}).update(row)
        progress = {seed(k, f"{at}.progress"): integer(v, f"{at}.progress.{k}")
                    for k, v in table(g["progress"], f"{at}.progress").items()}
        st.groups[cid] = _Group(name=string(g["name"], f"{at}.name"), baseline=boolean(g["baseline"], f"{at}.baseline"),
                                total_steps=total, collection=string(g["collection"], f"{at}.collection"),
                                values=values, progress=progress)
    for cid, d in table(top["stopped"], "stopped").items():
        at = f"stopped.{cid[:60]}"
        d = obj(d, at, {"name", "rung", "value", "rank", "groups", "keep", "reason"}, {"point"})
        if cid not in st.groups:
            raise bad(at, "a stopped configuration with no entry under groups")
        point = d.get("point")
        st.stopped[cid] = Stopped(
            name=string(d["name"], f"{at}.name"), rung=integer(d["rung"], f"{at}.rung"),
            value=number(d["value"], f"{at}.value"), rank=integer(d["rank"], f"{at}.rank", 1),
            groups=integer(d["groups"], f"{at}.groups", 1), keep=integer(d["keep"], f"{at}.keep", 1),
            reason=string(d["reason"], f"{at}.reason"),
            point=None if point is None else number(point, f"{at}.point"))
    return st


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(v), "a number")


def _shown(v: Any) -> str:
    text = json.dumps(v) if isinstance(v, str | int | float | bool | type(None)) else _kind(v)
    return text if len(text) <= 60 else text[:57] + "..."
