"""The confirmation phase of a study that picks (``confirm: {top, seeds}``; default top 1 with a
searcher): the top configurations by their mean dev objective and the baseline, retrained with fresh
seeds, so the comparison that decides is not made on the runs that picked. No Ray import: the
orchestration hands ``run_confirmation`` a function that runs the phase's tickets as a Tune
experiment (``<name>-confirmation``).

The pick: every configuration the earlier phases ran (``own``) that is a candidate, was not stopped
early (tag harness.stopped), and finished every study seed; ranked by the mean over seeds of its
seed runs' ``objective`` metric (the best checkpoint's dev value of the study metric), best first
by ``objective.mode``, ties by config id. Dev only: the test set plays no part in the pick.

The fresh seeds (``StudySpec.confirm.seeds``) are the integers after the largest study seed, so no
confirmation run shares a seed (initialisation, negatives, order) with an earlier one. Each
confirmation configuration is a config run of its own: config id ``<id>-confirm``, the same name
and role, tag harness.phase=confirmation on it and its seed runs. The study run records the pick
(tag harness.confirmation_pick) before the phase starts; a resumed driver takes the recorded pick,
restores the phase's Tune experiment and records nothing twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from harness.config import TrialConfig
from harness.study.protocol import TrialTicket
from harness.study.spec import StudySpec
from harness.tracking import conventions as C
from harness.tracking.records import StudyRecords, iter_runs

CONFIRM_SUFFIX = "-confirm"
RunPhase = Callable[[str, list[dict[str, Any]]], set[str]]  # (phase, Tune configs) -> config ids run


def confirmation_id(config_id: str) -> str:
    """The config id of a configuration's confirmation runs."""
    return f"{config_id}{CONFIRM_SUFFIX}"


def is_confirmation(config_id: str) -> bool:
    return config_id.endswith(CONFIRM_SUFFIX)


def phase_of(spec: StudySpec, ticket: TrialTicket) -> str:
    """The phase of a trial: confirmation (its config id), fixed (a configuration the study file
    lists) or search (a proposal)."""
    if is_confirmation(ticket.config_id):
        return C.PHASE_CONFIRMATION
    fixed = {nc.config.config_id() for nc in spec.fixed_configs()}
    return C.PHASE_FIXED if ticket.config_id in fixed else C.PHASE_SEARCH


@dataclass(frozen=True)
class Picked:
    config_id: str
    name: str
    dev: float  # mean dev objective over the study seeds
    flat: dict[str, Any]  # the seed-less flat configuration


def ranked(spec: StudySpec, records: StudyRecords, own: Collection[str]) -> list[tuple[str, str, float]]:
    """(config id, name, mean dev objective) of every eligible configuration, best first."""
    client = records.store.client
    out = []
    for run in iter_runs(client, records.experiment_id, C.KIND_CONFIG):
        tags = run.data.tags
        cid = tags.get(C.TAG_CONFIG_ID, "")
        if (cid not in own or is_confirmation(cid) or tags.get(C.TAG_ROLE) != C.ROLE_CANDIDATE
                or tags.get(C.TAG_STOPPED) == "1"):
            continue
        done = [records.done_run(f"{cid}-seed{s}") for s in spec.seeds]
        values = [float(r.metrics.get("objective", math.nan)) for r in done if r is not None]
        if len(values) != len(spec.seeds) or not all(map(math.isfinite, values)):
            continue  # a seed failed: not a finished configuration
        out.append((cid, run.info.run_name or cid, sum(values) / len(values)))
    sign = -1.0 if spec.mode == "max" else 1.0
    return sorted(out, key=lambda t: (sign * t[2], t[0]))


def pick(spec: StudySpec, records: StudyRecords, own: Collection[str]) -> list[Picked]:
    """The configurations the confirmation retrains (module docstring): the recorded pick when an
    earlier driver made one, else the top ``confirm.top`` by dev, recorded on the study run."""
    assert spec.confirm is not None
    study = records.study_run
    assert study is not None
    client = records.store.client
    recorded = client.get_run(study).data.tags.get(C.TAG_CONFIRM_PICK)
    best = {cid: (name, dev) for cid, name, dev in ranked(spec, records, own)}
    if recorded is not None:
        ids = [c for c in recorded.split(",") if c]
    else:
        ids = list(best)[:spec.confirm.top]
        records.study_tags({C.TAG_CONFIRM_PICK: ",".join(ids)})
    runs = records.config_runs()
    out = []
    for cid in ids:
        flat = json.loads(records.store.download_text(runs[cid], C.RESOLVED_ARTIFACT.format(config_id=cid)))
        name, dev = best.get(cid, (cid, math.nan))
        out.append(Picked(cid, name, dev, flat))
    return out


def tickets(spec: StudySpec, picked: list[Picked]) -> list[dict[str, Any]]:
    """The confirmation's trials: the baseline and each picked configuration x the fresh seeds."""
    assert spec.confirm is not None
    base = spec.baseline
    who = [(base.name, base.role, base.config.config_id(), base.config),
           *((p.name, C.ROLE_CANDIDATE, p.config_id, TrialConfig.from_flat(p.flat)) for p in picked)]
    return [TrialTicket(name, role, s, confirmation_id(cid), cfg.with_seed(s).to_flat()).to_tune()
            for name, role, cid, cfg in who for s in spec.confirm.seeds]


def run_confirmation(spec: StudySpec, records: StudyRecords, own: Collection[str], run_phase: RunPhase,
                     log: Callable[[str], None]) -> set[str]:
    """Pick, then run the confirmation phase; returns the config ids its trials ran."""
    assert spec.confirm is not None
    picked = pick(spec, records, own)
    if not picked:
        log("confirmation: no candidate finished every seed; nothing to confirm")
        return set()
    seeds = list(spec.confirm.seeds)
    log(f"confirmation: {', '.join(f'{p.name} (dev {spec.metric} {p.dev:.4f})' for p in picked)} and the "
        f"baseline, retrained with fresh seeds {seeds}")
    return run_phase(C.PHASE_CONFIRMATION, tickets(spec, picked))
