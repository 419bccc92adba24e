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

Over several collections (docs/study-file.md, "Collections") a configuration is picked as a whole:
eligible when it finished every study seed on every collection (and was stopped early on none),
ranked by the mean over the collections of its mean dev objective on each (or, with
``search.objective_collection``, that collection's alone); the confirmation retrains it and each
collection's baseline on every collection with the fresh seeds. The recorded pick lists the config
ids of the picked configurations on every collection.
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
    dev: float  # mean dev objective over the study seeds (and the collections)
    flat: dict[str, Any]  # the seed-less flat configuration
    collection: str = ""  # its collection, in a study over several


@dataclass(frozen=True)
class _Eligible:
    name: str
    dev: float
    ids: dict[str, str]  # collection ("" in a one-collection study) -> config id


def _ranked(spec: StudySpec, records: StudyRecords, own: Collection[str]) -> list[_Eligible]:
    """Every eligible configuration (module docstring) with its config id on each collection, best
    first by its mean dev objective, ties by config ids."""
    client = records.store.client
    per: dict[str, dict[str, tuple[str, float]]] = {}  # name -> collection -> (config id, mean dev)
    refused: set[str] = set()
    for run in iter_runs(client, records.experiment_id, C.KIND_CONFIG):
        tags = run.data.tags
        cid = tags.get(C.TAG_CONFIG_ID, "")
        if cid not in own or is_confirmation(cid) or tags.get(C.TAG_ROLE) != C.ROLE_CANDIDATE:
            continue
        name = run.info.run_name or cid
        done = [records.done_run(f"{cid}-seed{s}") for s in spec.seeds]
        values = [float(r.metrics.get("objective", math.nan)) for r in done if r is not None]
        if (tags.get(C.TAG_STOPPED) == "1" or len(values) != len(spec.seeds)
                or not all(map(math.isfinite, values))):
            refused.add(name)  # stopped early, or a seed failed: not a finished configuration
            continue
        per.setdefault(name, {})[tags.get(C.TAG_COLLECTION, "")] = (cid, sum(values) / len(values))
    target = spec.objective_collection
    wanted = set(spec.collections) or {""}
    out = []
    for name, on in per.items():
        if name in refused or set(on) != wanted:
            continue  # not finished on every collection
        devs = [dev for c, (_, dev) in on.items() if target is None or c == target]
        out.append(_Eligible(name, sum(devs) / len(devs), {c: on[c][0] for c in sorted(on)}))
    sign = -1.0 if spec.mode == "max" else 1.0
    return sorted(out, key=lambda e: (sign * e.dev, sorted(e.ids.values())))


def pick(spec: StudySpec, records: StudyRecords, own: Collection[str]) -> list[Picked]:
    """The configurations the confirmation retrains (module docstring): the recorded pick when an
    earlier driver made one, else the top ``confirm.top`` by dev, recorded on the study run (one
    Picked per configuration and collection)."""
    assert spec.confirm is not None
    study = records.study_run
    assert study is not None
    client = records.store.client
    recorded = client.get_run(study).data.tags.get(C.TAG_CONFIRM_PICK)
    best = {cid: e for e in _ranked(spec, records, own) for cid in e.ids.values()}
    if recorded is not None:
        ids = [c for c in recorded.split(",") if c]
    else:
        top = list({id(e): e for e in best.values()}.values())[:spec.confirm.top]
        ids = [cid for e in top for cid in e.ids.values()]
        records.study_tags({C.TAG_CONFIRM_PICK: ",".join(ids)})
    runs = records.config_runs()
    out = []
    for cid in ids:
        flat = json.loads(records.store.download_text(runs[cid], C.RESOLVED_ARTIFACT.format(config_id=cid)))
        e = best.get(cid)
        out.append(Picked(cid, e.name if e else cid, e.dev if e else math.nan, flat,
                          str(flat.get(C.COLLECTION_PARAM) or "")))
    return out


def tickets(spec: StudySpec, picked: list[Picked]) -> list[dict[str, Any]]:
    """The confirmation's trials: on each collection, its baseline and each picked configuration x
    the fresh seeds."""
    assert spec.confirm is not None
    who = []
    for collection in spec.collections or (None,):
        base = spec.collection_configs(collection)[0] if collection else spec.baseline
        who += [(base.name, base.role, base.config.config_id(), base.config),
                *((p.name, C.ROLE_CANDIDATE, p.config_id, TrialConfig.from_flat(p.flat)) for p in picked
                  if p.collection == (collection or ""))]
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
    names = {p.name: p.dev for p in picked}  # over several collections: one line per configuration
    where = f" on {len(spec.collections)} collections" if spec.collections else ""
    log(f"confirmation: {', '.join(f'{n} (dev {spec.metric} {d:.4f})' for n, d in names.items())} and the "
        f"baseline, retrained with fresh seeds {seeds}{where}")
    return run_phase(C.PHASE_CONFIRMATION, tickets(spec, picked))
