"""The trial protocol: what a trial is given (a ticket) and what it gives back (dev points, one
outcome, the outcome's files). Pure data, no Ray: the Ray glue (trainable, callback, searchers) only
moves these through Tune.

Ticket. Both phases hand Tune one config shape, ``{"ticket": {...}}`` (``TrialTicket.to_tune``): the
fixed phase lists its tickets as a grid, and in the search phase the searcher wrapper turns each
proposal plus the seed index into a ticket (``TrialTicket.proposed``). The driver and the trial read
it back with ``TrialTicket.from_tune``; the trial builds its ``TrialConfig`` once (``config()``).

Results. Every evaluation reports a ``DevPoint``; the end of training reports one ``TrialOutcome``.
Both map to Tune's result dict and back (``to_result``/``from_result``) with nested sections (``dev``,
``best_dev``, ``test``, ``cascade``, ``resolved``), so nothing is prefixed or JSON-encoded on the way.
The values a searcher or scheduler reads sit at the top level or in those sections:
``objective_key`` names them as Tune's flattened result spells them (``best_dev/map``).

Seed groups. With ``resources.seeds_per_trial: k`` one trial trains up to k seeds of one
configuration (``group_tickets``): its ticket lists them (``seeds``) and ``members()`` gives each
seed's own ticket, whose key names its seed run as a one-seed trial's would. A group trial reports
one ``DevPoint`` result per evaluation with its members' points under ``members`` (top-level values:
the members' means), and one outcome result with each member's outcome under ``members`` and its
files in the member's folder of the checkpoint (``write_group_outcome``, ``read_group_outcome``).

Files. Per-query values never travel in the result stream: the trial writes them, with the outcome,
into the directory of its final checkpoint (``write_outcome``); the driver reads that directory
(``read_outcome``). Everything a trial puts under ``artifacts/`` there is logged as an artifact of
its seed run, at the same relative path (``artifact_files``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import TrialConfig
from harness.tracking.conventions import BEST_DEV_PREFIX, ROLE_CANDIDATE

TICKET = "ticket"
MEMBERS = "members"  # a group trial's per-seed results, and its checkpoint's per-seed folders
GROUP_SIZE = "group_size"  # a group trial's outcome: how many seeds its values average
OUTCOME_FILE = "outcome.json"
PER_QUERY_FILE = "per_query.json"
ARTIFACTS_DIR = "artifacts"

PerQuery = dict[str, dict[str, float]]  # {measure: {qid: value}}


@dataclass(frozen=True)
class TrialTicket:
    """One trial: a configuration (id, display name, role) and a seed; ``flat`` is the full flat
    config with ``train.seed`` set to ``seed``. A seed group's ticket (``seeds``: two or more) trains
    each of its seeds (``members()``); ``seed`` and ``flat`` are then its first member's."""

    name: str
    role: str
    seed: int
    config_id: str
    flat: Mapping[str, Any]
    seeds: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        if self.seeds:
            return f"{self.config_id}-seeds{'_'.join(map(str, self.seeds))}"
        return f"{self.config_id}-seed{self.seed}"

    def members(self) -> list[TrialTicket]:
        """The one-seed tickets this trial trains: itself, or each seed of a group."""
        if not self.seeds:
            return [self]
        return [TrialTicket(self.name, self.role, s, self.config_id, {**self.flat, "train.seed": s})
                for s in self.seeds]

    def member(self, key: str) -> TrialTicket:
        """The member whose key is ``key`` (a group result names its members by key)."""
        for m in self.members():
            if m.key == key:
                return m
        raise KeyError(f"trial {self.key} has no member {key}")

    @classmethod
    def of(cls, name: str, role: str, cfg: TrialConfig, seed: int) -> TrialTicket:
        return cls(name, role, int(seed), cfg.config_id(), cfg.with_seed(int(seed)).to_flat())

    @classmethod
    def proposed(cls, suggested: Mapping[str, Any], defaults: Mapping[str, Any], seed: int,
                 searcher: str) -> TrialTicket:
        """A searcher's proposal (flat dotted keys over the study defaults) with one study seed."""
        cfg = TrialConfig.from_flat(dict(suggested), base=TrialConfig.from_flat(dict(defaults)))
        return cls.of(f"{searcher}-{cfg.config_id()[:6]}", ROLE_CANDIDATE, cfg, seed)

    def config(self) -> TrialConfig:
        return TrialConfig.from_flat(dict(self.flat))

    def to_tune(self) -> dict[str, Any]:
        t = {"name": self.name, "role": self.role, "seed": self.seed, "config_id": self.config_id,
             "flat": dict(self.flat)}
        return {TICKET: {**t, "seeds": list(self.seeds)} if self.seeds else t}

    @classmethod
    def from_tune(cls, config: Mapping[str, Any]) -> TrialTicket:
        t = config[TICKET]
        return cls(t["name"], t["role"], int(t["seed"]), t["config_id"], dict(t["flat"]),
                   tuple(int(s) for s in t.get("seeds") or ()))

    def grouped(self, seeds: list[int] | tuple[int, ...]) -> TrialTicket:
        """This configuration's ticket for ``seeds`` (one seed: a plain ticket, as today)."""
        first = int(seeds[0])
        flat = {**self.flat, "train.seed": first}
        return TrialTicket(self.name, self.role, first, self.config_id, flat,
                           tuple(int(s) for s in seeds) if len(seeds) > 1 else ())


def group_tickets(tickets: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """One-seed Tune configs (``to_tune``) grouped k seeds to a trial: each configuration's seeds in
    their order, in runs of k (the last run shorter when k does not divide them); configurations
    keep the order of their first ticket. ``k == 1`` returns ``tickets`` unchanged."""
    if k <= 1:
        return tickets
    by_config: dict[str, list[TrialTicket]] = {}
    for t in tickets:
        ticket = TrialTicket.from_tune(t)
        if ticket.seeds:
            raise ValueError(f"ticket {ticket.key} is grouped already")
        by_config.setdefault(ticket.config_id, []).append(ticket)
    out = []
    for members in by_config.values():
        for i in range(0, len(members), k):
            chunk = members[i:i + k]
            out.append(chunk[0].grouped([m.seed for m in chunk]).to_tune())
    return out


def seed_groups(seeds: tuple[int, ...] | list[int], k: int) -> list[tuple[int, ...]]:
    """A configuration's seeds in runs of k (the last shorter when k does not divide them)."""
    seeds = tuple(seeds)
    return [seeds[i:i + max(1, k)] for i in range(0, len(seeds), max(1, k))]


def _floats(values: Mapping[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (values or {}).items()}


@dataclass(frozen=True)
class DevPoint:
    """One dev evaluation: this evaluation's metrics, the best so far and the objective (the best
    dev value of the study metric so far, what a scheduler compares)."""

    key: str
    step: int
    metrics: Mapping[str, float]
    best: Mapping[str, float]
    objective: float

    def to_result(self) -> dict[str, Any]:
        return {"trial_key": self.key, "step": self.step, "dev": dict(self.metrics),
                "best_dev": dict(self.best), "objective": self.objective}

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> DevPoint:
        return cls(result["trial_key"], int(result["step"]), _floats(result["dev"]),
                   _floats(result.get("best_dev")), float(result["objective"]))


@dataclass(frozen=True)
class TrialOutcome:
    """The end of a trial: the best-dev checkpoint's dev metrics (``best_dev``) and test metrics
    (``test``), ``objective`` (its dev value of the study metric), cascade figures as the trainer
    names them (dev ``cascade_map``/``cascade_cost``, ``test_exit<L>_<m>``, ``test_cascade_<m>``),
    resolved schedule values, the evaluation set's fingerprint and wall-clock start and end.
    ``replayed``: the trial was recorded as finished before (resume) and only reports its objective
    again; such an outcome carries nothing else."""

    key: str
    objective: float
    best_step: int = 0
    test: Mapping[str, float] = field(default_factory=dict)
    best_dev: Mapping[str, float] = field(default_factory=dict)
    cascade: Mapping[str, float] = field(default_factory=dict)
    resolved: Mapping[str, float] = field(default_factory=dict)
    evaluation: str | None = None
    started: float = math.nan
    ended: float = math.nan
    replayed: bool = False

    @classmethod
    def replay(cls, key: str, objective: float) -> TrialOutcome:
        return cls(key, float(objective), replayed=True)

    @classmethod
    def from_final(cls, key: str, final: Any, *, metric: str, select_metric: str, evaluation: str | None,
                   started: float, ended: float) -> TrialOutcome:
        """The outcome of a trainer's FinalRecord (harness.training.loop); ``objective`` is the best
        checkpoint's dev value of ``metric`` (a cascade objective's from ``final.cascade``: dev, at
        the configured alphas). A configuration without a cascade has no cascade metrics: its
        relative cost is 1 (every candidate through every layer) and its cascade MAP its MAP; any
        other metric it lacks is ``select_metric``'s."""
        if metric in final.dev:
            objective = final.dev[metric]
        elif metric in final.cascade:
            objective = final.cascade[metric]
        elif metric == "cascade_cost":
            objective = 1.0
        else:
            objective = final.dev.get("map" if metric == "cascade_map" else select_metric, final.dev[select_metric])
        return cls(key, float(objective), int(final.best_step),
                   _floats(final.metrics), _floats(final.dev), _floats(final.cascade),
                   _floats(final.resolved), evaluation, float(started), float(ended))

    @property
    def metrics(self) -> dict[str, float]:
        """The seed run's metrics besides the test metrics (logged under their own names): the
        tested checkpoint's dev values among them, as ``best_dev_<metric>``."""
        return {"best_step": float(self.best_step), "objective": self.objective,
                **{f"{BEST_DEV_PREFIX}{k}": v for k, v in self.best_dev.items()}, **self.cascade,
                "trial_started": self.started, "trial_ended": self.ended, **self.resolved}

    def to_result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"final": True, "trial_key": self.key, "objective": self.objective}
        if self.replayed:
            return {**out, "replayed": True}
        return {**out, "best_step": self.best_step, "test": dict(self.test),
                "best_dev": dict(self.best_dev), "cascade": dict(self.cascade),
                "resolved": dict(self.resolved), "eval_fingerprint": self.evaluation,
                "started": self.started, "ended": self.ended}

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> TrialOutcome:
        if result.get("replayed"):
            return cls.replay(result["trial_key"], result["objective"])
        return cls(result["trial_key"], float(result["objective"]), int(result["best_step"]),
                   _floats(result.get("test")), _floats(result.get("best_dev")),
                   _floats(result.get("cascade")), _floats(result.get("resolved")),
                   result.get("eval_fingerprint"), float(result["started"]), float(result["ended"]))


def is_outcome(result: Mapping[str, Any]) -> bool:
    """Whether a Tune result is a trial's final one (an outcome, replayed or not)."""
    return bool(result.get("final"))


def objective_key(metric: str, study_metric: str, n_objectives: int) -> str:
    """The key of Tune's flattened final result a searcher reads for an objective: the trial's best
    dev value (``objective``) for a single objective on the study metric, ``best_dev/<m>`` per
    metric otherwise, ``cascade/<m>`` for the cascade objectives (dev, at the configured alphas)."""
    if metric.startswith("cascade_"):
        return f"cascade/{metric}"
    return "objective" if n_objectives == 1 and metric == study_metric else f"best_dev/{metric}"


# -- the outcome's files -------------------------------------------------------------------------

def write_outcome(directory: str | Path, outcome: TrialOutcome, per_query: PerQuery) -> Path:
    """The outcome and its per-query values into ``directory``; returns the ``artifacts/`` folder in
    it, where further files for the seed run go (created)."""
    d = Path(directory)
    (d / OUTCOME_FILE).write_text(json.dumps(outcome.to_result(), sort_keys=True))
    (d / PER_QUERY_FILE).write_text(json.dumps(per_query, sort_keys=True))
    art = d / ARTIFACTS_DIR
    art.mkdir(exist_ok=True)
    return art


def read_outcome(directory: str | Path) -> tuple[TrialOutcome, PerQuery] | None:
    """What ``write_outcome`` wrote, or None when ``directory`` holds no outcome (a checkpoint of
    an evaluation, not of the end)."""
    d = Path(directory)
    if not (d / OUTCOME_FILE).is_file():
        return None
    outcome = TrialOutcome.from_result(json.loads((d / OUTCOME_FILE).read_text()))
    raw = json.loads((d / PER_QUERY_FILE).read_text()) if (d / PER_QUERY_FILE).is_file() else {}
    return outcome, {m: _floats(v) for m, v in raw.items()}


def artifact_files(directory: str | Path) -> Iterator[tuple[Path, str | None]]:
    """(file, artifact folder) for every file under ``directory``/artifacts, the folder being its
    path relative to artifacts/ (None at the top)."""
    art = Path(directory) / ARTIFACTS_DIR
    if not art.is_dir():
        return
    for path in sorted(p for p in art.rglob("*") if p.is_file()):
        rel = path.parent.relative_to(art).as_posix()
        yield path, (None if rel == "." else rel)


# -- a seed group's results and files -----------------------------------------------------------

def _mean_of(values: list[Mapping[str, float]]) -> dict[str, float]:
    """Per key, the mean over the members that have it."""
    keys = sorted({k for v in values for k in v})
    return {k: float(sum(v[k] for v in values if k in v) / sum(1 for v in values if k in v)) for k in keys}


def group_point(key: str, step: int, points: list[DevPoint]) -> dict[str, Any]:
    """A seed group's evaluation as one Tune result: the members' means at the top (what a DevPoint
    result holds) and each member's point under ``members``."""
    return {**DevPoint(key, step, _mean_of([p.metrics for p in points]), _mean_of([p.best for p in points]),
                       float(sum(p.objective for p in points) / len(points))).to_result(),
            MEMBERS: [p.to_result() for p in points]}


def group_outcome(key: str, outcomes: list[TrialOutcome]) -> dict[str, Any]:
    """A seed group's end as one Tune result: ``objective``, ``best_dev`` and ``cascade`` are the
    members' means (what a searcher reads, ``objective_key``), ``group_size`` how many seeds they
    average, ``members`` each member's outcome."""
    out: dict[str, Any] = {"final": True, "trial_key": key,
                           "objective": float(sum(o.objective for o in outcomes) / len(outcomes)),
                           GROUP_SIZE: len(outcomes), MEMBERS: [o.to_result() for o in outcomes]}
    if all(o.replayed for o in outcomes):
        return {**out, "replayed": True}
    return {**out, "best_dev": _mean_of([o.best_dev for o in outcomes]),
            "cascade": _mean_of([o.cascade for o in outcomes])}


def member_outcomes(result: Mapping[str, Any]) -> list[TrialOutcome]:
    """The members' outcomes of a group's outcome result."""
    return [TrialOutcome.from_result(r) for r in result.get(MEMBERS) or ()]


def member_points(result: Mapping[str, Any]) -> list[DevPoint]:
    """The members' dev points of a group's evaluation result."""
    return [DevPoint.from_result(r) for r in result.get(MEMBERS) or ()]


def member_dir(directory: str | Path, key: str) -> Path:
    """A member's folder in a group checkpoint: its ``trainer.pt`` while training, its outcome,
    per-query values, artifacts and best-dev weights at the end."""
    return Path(directory) / MEMBERS / key


def write_group_outcome(directory: str | Path, result: Mapping[str, Any]) -> Path:
    """The group's outcome result (``group_outcome``) at the top of its final checkpoint; the
    members' own outcomes go to their folders (``write_outcome(member_dir(...))``)."""
    path = Path(directory) / OUTCOME_FILE
    path.write_text(json.dumps(dict(result), sort_keys=True))
    return path


def read_group_outcome(directory: str | Path) -> dict[str, Any] | None:
    """The group outcome result in ``directory``, or None (an evaluation's checkpoint)."""
    path = Path(directory) / OUTCOME_FILE
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    return result if MEMBERS in result else None
