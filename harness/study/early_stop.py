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
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    def from_json(cls, text: str, settings: EarlyStopSettings | None = None) -> EarlyStopState:
        """The saved state; ``settings`` (the study file's, which may have changed) win over the
        saved ones for decisions still to come, while the stopped configurations stay stopped.
        A state of version 1 kept rung values by step: each moves to the rung of its step."""
        raw: dict[str, Any] = json.loads(text)
        saved = raw["settings"]
        own = EarlyStopSettings(rungs=tuple(saved["rungs"]), reduction_factor=saved["reduction_factor"],
                                metric=saved["metric"], mode=saved["mode"])
        st = cls(settings or own, min_groups=int(raw.get("min_groups", 1)))
        st.groups = {cid: _Group(**g) for cid, g in raw.get("groups", {}).items()}
        if raw.get("version") == 1:
            for g in st.groups.values():
                values: dict[str, dict[str, float]] = {}
                for step, seeds in g.values.items():
                    rung = rung_of(own, int(step), g.total_steps)
                    if rung is not None:
                        values.setdefault(rung_key(rung), {}).update(seeds)
                g.values = values
        st.stopped = {cid: Stopped(**s) for cid, s in raw.get("stopped", {}).items()}
        return st

    @classmethod
    def load(cls, path: str | Path, settings: EarlyStopSettings, min_groups: int = 1) -> EarlyStopState:
        p = Path(path)
        if p.is_file():
            st = cls.from_json(p.read_text(), settings)
            st.min_groups = min_groups
            return st
        return cls(settings, min_groups)

    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(p)
