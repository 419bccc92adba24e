"""Seeds added in rounds (a study's seed schedule, ``seeds: {start, step, max}``): the driver side of
the group-sequential rule in harness.stats.sequential. No Ray import: the orchestration hands
``run_rounds`` a function that runs one round's tickets as a Tune experiment.

Lifecycle of ``run_rounds``:

1. Round 1 is the Tune experiment ``<name>-fixed``: the baseline and every candidate with the first
   ``start`` seeds.
2. After round k, every open comparison (candidate vs baseline) is tested on each look j <= k: the
   crossed seeds x queries test of the study's objective metric on the test queries, on the first
   n_j seeds, read back from the per-query values in MLflow. The signed scores go to
   ``GroupSequential.verdict`` at the comparison's Bonferroni share 0.05 / m (m: the candidates,
   times the collections of a study over several: ``harness.study.rounds.comparisons``).
   A comparison whose verdict is settled (better, worse), hopeless (futility) or at max seeds gets
   no more seeds; its config run gets the reason as tag harness.sequential and the round and seed
   count as metrics.
3. Round k + 1 is the Tune experiment ``<name>-round<k+1>``: the baseline (which needs every seed an
   open comparison has) and the open candidates with the round's new seeds. Each seed run carries
   its round (tag harness.round; the callback sets it from the seed's place in the schedule).
4. The loop ends when no comparison is open; the baseline's config run records how many seeds the
   open comparisons needed.

Which metric and split decide: the study's objective metric on the test queries, the verdict the
final table marks. The rule looks at the test set between rounds, which is what its boundaries
account for (the error rate is controlled over all looks), and it selects nothing: it only decides
whether a comparison needs more seeds. The progress lines show the verdicts, never a test value.

Resume: every decision is a function of the recorded seed runs (the looks are recomputed from
MLflow, never kept elsewhere), so a resumed driver takes the same rounds: a round whose Tune
experiment exists is restored, its finished trials replayed, and nothing is recorded twice.
A trial that failed after its retries leaves its comparison (every open one, for a baseline seed)
without data: it stops as incomplete, and the study's report names the missing seeds.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from harness.metrics.measures import metric_key
from harness.stats.crossed import crossed_test
from harness.stats.sequential import Stop, signed_z
from harness.study.protocol import TrialTicket
from harness.study.rounds import design
from harness.study.spec import NamedConfig, StudySpec
from harness.tracking import conventions as C
from harness.tracking.records import SeedRun, StudyRecords, iter_runs, read_per_query

RunRound = Callable[[str, list[dict[str, Any]]], set[str]]  # (phase, Tune configs) -> config ids run


def received(spec: StudySpec, records: StudyRecords, config_id: str) -> list[int]:
    """The seeds a configuration's summary covers: its finished ones with a schedule, else every
    study seed."""
    if spec.confirm is not None and config_id.endswith("-confirm"):  # harness.driver._confirm
        return list(spec.confirm.seeds)
    if spec.seed_schedule is None:
        return list(spec.seeds)
    return records.done_seeds(config_id) or list(spec.seeds)


@contextlib.contextmanager
def _quiet_downloads() -> Iterator[None]:
    """No artifact-download progress bars on the driver's stderr (a user's own setting wins)."""
    key = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    saved = os.environ.get(key)
    os.environ.setdefault(key, "false")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)


class _PerQuery:
    """The objective's per-query test values of the study's seed runs, read from MLflow once each."""

    def __init__(self, records: StudyRecords, metric: str) -> None:
        self.records = records
        self.metric = metric
        self.values: dict[tuple[str, int], dict[str, float]] = {}

    def refresh(self, config_ids: Iterable[str]) -> None:
        wanted = set(config_ids)
        client = self.records.store.client
        with tempfile.TemporaryDirectory() as tmp, _quiet_downloads():
            for run in map(SeedRun.of, iter_runs(client, self.records.experiment_id, C.KIND_TRIAL)):
                if (run.config_id not in wanted or run.seed is None or not run.done
                        or (run.config_id, int(run.seed)) in self.values):
                    continue
                per_query = read_per_query(client, run.run_id, tmp, f"study {self.records.study_name!r}",
                                           metric_key) or {}
                if self.metric in per_query:
                    self.values[(run.config_id, int(run.seed))] = per_query[self.metric]

    def matrix(self, config_id: str, seeds: list[int], qids: list[str]) -> np.ndarray:
        return np.array([[self.values[(config_id, s)][q] for q in qids] for s in seeds])


def _scores(data: _PerQuery, base: str, cand: str, spec: StudySpec, rounds: int) -> tuple[list[float], str]:
    """The signed scores of looks 1..``rounds`` of one comparison, or why there are none."""
    assert spec.seed_schedule is not None
    seeds = list(spec.seeds[:spec.seed_schedule.looks[rounds - 1]])
    missing = [f"{who} seed {s}" for who, cid in (("baseline", base), ("candidate", cand))
               for s in seeds if (cid, s) not in data.values]
    if missing:
        return [], f"incomplete at round {rounds}: no finished trial with test {spec.metric} for " + ", ".join(missing)
    qids = sorted(data.values[(base, seeds[0])])
    z = []
    for n in spec.seed_schedule.looks[:rounds]:
        r = crossed_test(data.matrix(cand, seeds[:n], qids), data.matrix(base, seeds[:n], qids))
        z.append(float(signed_z(r.mean_diff, r.p_value)))
    return z, ""


def run_rounds(spec: StudySpec, records: StudyRecords, run_round: RunRound,
               log: Callable[[str], None]) -> set[str]:
    """Run the study's rounds (module docstring); returns the config ids the rounds' trials ran.

    Over several collections (docs/study-file.md, "Collections") every comparison is a candidate
    against its own collection's baseline, decided by the same rule on that collection's results
    alone; a configuration trains a round's seeds on every collection while any of its comparisons
    is open, so its seeds are the same on every collection."""
    schedule = spec.seed_schedule
    if schedule is None:
        raise ValueError(f"study {spec.name!r} has no seed schedule")
    rule = design(spec)
    collections: list[str | None] = list(spec.collections) or [None]
    per = {c: spec.collection_configs(c) for c in collections}  # the baseline first
    bases = {c: configs[0].config.config_id() for c, configs in per.items()}
    # The comparisons not yet decided: candidate config id -> (its configuration, its collection).
    open_: dict[str, tuple[NamedConfig, str | None]] = {
        nc.config.config_id(): (nc, c) for c, configs in per.items() for nc in configs[1:]}
    data = _PerQuery(records, spec.metric)
    own: set[str] = set()
    done = 0
    for k, n in enumerate(schedule.looks, start=1):
        new = list(spec.seeds[done:n])
        done = n
        training = {nc.name for nc, _ in open_.values()}
        who = [nc for c in collections for nc in per[c] if nc.role == C.ROLE_BASELINE or nc.name in training]
        tickets = [TrialTicket.of(nc.name, nc.role, nc.config, s).to_tune() for nc in who for s in new]
        log(f"round {k} of {schedule.rounds}: {len(who)} configurations x seeds {new} "
            f"({len(open_)} comparisons open)")
        own |= run_round("fixed" if k == 1 else f"round{k}", tickets)
        # The config runs were made by the callback (or, for a restored round, its unpickled copy).
        records = StudyRecords(records.store, records.experiment_id, records.study_name)
        data.records = records
        data.refresh([*bases.values(), *open_])
        lines = []
        for cid, (nc, collection) in list(open_.items()):
            who_ = nc.name if collection is None else f"{nc.name} on {collection}"
            z, problem = _scores(data, bases[collection], cid, spec, k)
            if problem:
                reason, metrics = problem, {C.METRIC_SEQUENTIAL_ROUND: float(k), C.METRIC_SEQUENTIAL_SEEDS: float(n)}
            else:
                verdict = rule.verdict(z)
                if verdict.stop is Stop.OPEN:
                    lines.append(f"{who_}: open")
                    continue
                reason = verdict.reason
                metrics = {C.METRIC_SEQUENTIAL_ROUND: float(verdict.round),
                           C.METRIC_SEQUENTIAL_SEEDS: float(verdict.seeds)}
            records.config_report(cid, metrics, {C.TAG_SEQUENTIAL: reason})
            lines.append(f"{who_}: {reason}")
            del open_[cid]
        log(f"round {k}: " + "; ".join(lines))
        if not open_:
            for base in bases.values():
                records.config_report(base, {C.METRIC_SEQUENTIAL_ROUND: float(k),
                                             C.METRIC_SEQUENTIAL_SEEDS: float(n)},
                                      {C.TAG_SEQUENTIAL: f"baseline: {n} seeds over {k} rounds, every seed an "
                                                         f"open comparison needed"})
            break
    return own
