"""The one layer that shapes MLflow records (conventions.py), for writing and for reading them back.

Writing: ``StudyRecords`` turns the events of a study into runs, tags, metrics and artifacts: study
started, trial started, dev point, trial finished, trial failed, config summary (mean and SD over
seeds, computed by the caller), config report (the tests against the baseline), study artifacts, reference MAPs, report
failed, end. `harness run` drives it from the study's driver; `harness train` records its one
configuration through it as well, so both give the same seed runs.

Idempotent by construction: every run is found by its tags before one is created, and a seed run is
marked done only once, so a resumed study (a fresh driver) adds no duplicate runs and never rewrites
a finished trial. All writes happen on the driver.

Reading: ``iter_runs`` (the runs of one kind), ``SeedRun.of`` (a seed run's tags and metrics, the
test metrics without their prefix) and ``read_per_query`` (the per-query artifact); the study
writer's resume and `harness table --experiment` (harness.results.mlflow_reader) both read
through them.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse
from urllib.request import url2pathname

from harness.errors import DataError
from harness.tracking import conventions as C
from harness.tracking.store import TrackingStore

PerQuery = dict[str, dict[str, float]]  # {measure: {qid: value}}


class Ticket(Protocol):
    """Who a trial is (harness.study.protocol.TrialTicket): configuration id, display name, role,
    seed, the full flat config and the trial key."""

    config_id: str
    name: str
    role: str
    seed: int
    flat: Mapping[str, Any]

    @property
    def key(self) -> str: ...


class Outcome(Protocol):
    """What a finished trial recorded (harness.study.protocol.TrialOutcome): its test metrics
    (without the test_ prefix), its other metrics, and its evaluation set's fingerprint."""

    test: Mapping[str, float]
    metrics: Mapping[str, float]
    evaluation: str


# -- reading -------------------------------------------------------------------------------------

def unprefixed(metrics: Mapping[str, float], prefix: str) -> dict[str, float]:
    """The metrics named ``<prefix><name>``, by name."""
    return {k[len(prefix):]: float(v) for k, v in metrics.items() if k.startswith(prefix)}


def iter_runs(client: Any, experiment_id: str, kind: str) -> Iterator[Any]:
    """Every run of one kind (tag harness.kind) in an experiment, page by page."""
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = '{kind}'",
                                  max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


@dataclass(frozen=True)
class SeedRun:
    """A seed run as recorded: ids, tags, test metrics (without test_) and status."""

    run_id: str
    config_id: str | None
    seed: str | None
    role: str | None
    trial_key: str | None
    evaluation: str | None
    done: bool
    status: str
    test: Mapping[str, float]
    metrics: Mapping[str, float]
    start_time: int
    name: str = ""  # the run's name, <configuration>-seed<seed>
    error: str = ""  # why it failed (tag harness.error)
    artifact_uri: str = ""  # the run's artifact root

    @classmethod
    def of(cls, run: Any) -> SeedRun:
        tags, metrics = run.data.tags, run.data.metrics
        return cls(run.info.run_id, tags.get(C.TAG_CONFIG_ID), tags.get(C.TAG_SEED), tags.get(C.TAG_ROLE),
                   tags.get(C.TAG_TRIAL_KEY), tags.get(C.TAG_EVAL_FINGERPRINT), tags.get(C.TAG_DONE) == "1",
                   run.info.status, unprefixed(metrics, C.TEST_PREFIX), dict(metrics), run.info.start_time or 0,
                   run.info.run_name or "", tags.get(C.TAG_ERROR, ""), run.info.artifact_uri or "")


def local_artifact(artifact_uri: str | None, path: str) -> Path | None:
    """``path`` under a run's artifact root where that root is a local folder (a file: URI or a
    plain path, what a local store has), None where it is remote or unknown."""
    if not artifact_uri:
        return None
    parsed = urlparse(artifact_uri)
    if parsed.scheme not in ("", "file"):
        return None
    root = url2pathname(parsed.path) if parsed.scheme == "file" else artifact_uri
    return Path(root, path)


def read_per_query(client: Any, run_id: str, tmp: str, source: str,
                   measure_name: Callable[[str], str] = str, artifact_uri: str | None = None) -> PerQuery | None:
    """A seed run's per_query/test.csv as {measure: {qid: value}} (None when the run has no such
    file: the harness logs one with every seed run it finishes, so the caller tells a run logged
    without per-query values from one whose file was lost); ``measure_name`` maps a measure as
    written to the name it is read as. ``artifact_uri``: the run's artifact root
    (``run.info.artifact_uri``); where it is a local folder the file is read from it, with no store
    query per run."""
    local = local_artifact(artifact_uri, C.PER_QUERY_ARTIFACT)
    if local is None:
        folder, _, filename = C.PER_QUERY_ARTIFACT.rpartition("/")
        if not any(Path(a.path).name == filename for a in client.list_artifacts(run_id, folder)):
            return None
        local = Path(client.download_artifacts(run_id, C.PER_QUERY_ARTIFACT, str(Path(tmp) / run_id)))
    elif not local.is_file():
        return None
    out: dict[str, dict[str, float]] = {}
    with local.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != C.PER_QUERY_COLUMNS:
            raise DataError(f"{source}: run {run_id} {C.PER_QUERY_ARTIFACT} has columns "
                            f"{reader.fieldnames}, expected {', '.join(C.PER_QUERY_COLUMNS)}")
        seen: dict[tuple[str, str], int] = {}
        for line, row in enumerate(reader, start=2):
            where = f"{source}: run {run_id} {C.PER_QUERY_ARTIFACT}:{line}"
            try:
                value = float(row["value"])
            except (TypeError, ValueError):
                raise DataError(f"{where}: value {row['value']!r} is not a number") from None
            if not math.isfinite(value):  # a NaN would reach the tests, and its error name no run
                raise DataError(f"{where}: value {row['value']!r} of query {row['qid']!r} is not a finite number")
            measure = measure_name(row["measure"])
            first = seen.setdefault((measure, row["qid"]), line)
            if first != line:  # the later row silently replaced the earlier
                raise DataError(f"{where}: query {row['qid']!r} of {measure} again (first on line {first})")
            out.setdefault(measure, {})[row["qid"]] = value
    return out


# -- writing -------------------------------------------------------------------------------------

def collection_tag(flat: Mapping[str, Any]) -> dict[str, str]:
    """The collection tag of a run whose configuration names its collection (none otherwise)."""
    name = flat.get(C.COLLECTION_PARAM)
    return {C.TAG_COLLECTION: str(name)} if name else {}


class StudyRecords:
    """The MLflow records of one study (experiment ``study_name``): study run > config run > seed run."""

    def __init__(self, store: TrackingStore, experiment_id: str, study_name: str) -> None:
        self.store = store
        self.experiment_id = experiment_id
        self.study_name = study_name
        self._study: str | None = None
        self._configs: dict[str, str] = {}
        self._config_phase: dict[str, str] = {}  # config id -> its phase tag, as recorded
        self._seeds: dict[str, str] = {}
        self._done: dict[str, SeedRun] = {}
        self._last_step: dict[str, int] = {}
        self._test: dict[str, dict[int, dict[str, float]]] = {}
        self._recovered: set[str] = set()  # runs an earlier driver created, not yet described again
        # Finished seed runs recorded twice for one trial (two drivers at once, before the lease on
        # the experiment): (the one kept, the other); ``remove_duplicates`` deletes the others.
        self.duplicates: list[tuple[SeedRun, SeedRun]] = []
        self._load()

    @classmethod
    def open(cls, store: TrackingStore, study_name: str) -> StudyRecords:
        return cls(store, store.experiment(study_name), study_name)

    def _load(self) -> None:
        """Recover what earlier drivers recorded (resume)."""
        client = self.store.client
        for run in iter_runs(client, self.experiment_id, C.KIND_STUDY):
            self._study = run.info.run_id
        for run in iter_runs(client, self.experiment_id, C.KIND_CONFIG):
            self._configs[run.data.tags[C.TAG_CONFIG_ID]] = run.info.run_id
            self._config_phase[run.data.tags[C.TAG_CONFIG_ID]] = run.data.tags.get(C.TAG_PHASE, "")
            self._recovered.add(run.info.run_id)
        trials = sorted(map(SeedRun.of, iter_runs(client, self.experiment_id, C.KIND_TRIAL)),
                        key=lambda s: (s.start_time, s.run_id))
        for seed in trials:
            if not seed.trial_key:
                continue
            kept = self._done.get(seed.trial_key)
            if kept is not None:  # the first finished run of the trial stays; this one duplicates it
                if seed.done:
                    self.duplicates.append((kept, seed))
                continue
            self._seeds[seed.trial_key] = seed.run_id
            self._recovered.add(seed.run_id)
            if seed.done and seed.status != "FINISHED":
                # The done tag is the commit point of trial_finished; a driver killed right after it
                # left the run RUNNING, which the report's reader (FINISHED runs) would skip.
                self.store.end_run(seed.run_id, "FINISHED")
                seed = replace(seed, status="FINISHED")
            if seed.done and seed.config_id is not None and seed.seed is not None:
                self._done[seed.trial_key] = seed
                self._test.setdefault(seed.config_id, {})[int(seed.seed)] = dict(seed.test)

    def remove_duplicates(self) -> list[tuple[SeedRun, SeedRun]]:
        """Delete (MLflow's soft delete: out of every search, restorable) each finished seed run
        that repeats an earlier finished run of the same trial, after tagging it with the run it
        repeats (harness.duplicate_of); returns what was removed as (kept, removed)."""
        removed = []
        for kept, dup in self.duplicates:
            self.store.set_tags(dup.run_id, {C.TAG_DUPLICATE_OF: kept.run_id})
            self.store.client.delete_run(dup.run_id)
            removed.append((kept, dup))
        self.duplicates = []
        return removed

    # -- events --------------------------------------------------------------------------------

    def study_started(self, *, study_text: str | None = None, params: Mapping[str, Any] | None = None,
                      tags: Mapping[str, str] | None = None) -> str:
        """The study run (created once; a resumed study finds it, and it is RUNNING again until
        this driver ends it), with ``tags`` beside its kind."""
        if self._study is not None:
            self.store.client.update_run(self._study, status="RUNNING")
        if self._study is None:
            # An experiment an older version made has no kind yet (TrackingStore.experiment sets it).
            exp = self.store.client.get_experiment(self.experiment_id)
            if C.TAG_EXPERIMENT_KIND not in exp.tags:
                self.store.client.set_experiment_tag(self.experiment_id, C.TAG_EXPERIMENT_KIND, C.EXPERIMENT_KIND)
            self._study = self.store.start_run(self.experiment_id, self.study_name, {
                C.TAG_KIND: C.KIND_STUDY, C.TAG_STUDY: self.study_name, **(tags or {})})
            if study_text is not None:
                self.store.log_text(self._study, study_text, C.STUDY_FILE_ARTIFACT)
            if params:
                self.store.log_params(self._study, params)
        return self._study

    def config_run(self, ticket: Ticket, tags: Mapping[str, str] | None = None) -> str:
        """The config run of a trial's configuration (created once). Its params and its resolved
        config are logged again on a run an earlier driver created: that driver may have died
        between creating the run and describing it (logging the same values again changes nothing).
        ``tags`` (its phase) are set when the run is made or recovered."""
        run = self._configs.get(ticket.config_id)
        if run is None:
            if self._study is None:
                raise RuntimeError("study_started() must come before config runs are created")
            run = self.store.start_run(self.experiment_id, ticket.name, {
                C.TAG_KIND: C.KIND_CONFIG, C.TAG_CONFIG_ID: ticket.config_id, C.TAG_ROLE: ticket.role,
                C.TAG_STUDY: self.study_name, **collection_tag(ticket.flat), **(tags or {})},
                parent=self._study)
            self._configs[ticket.config_id] = run
        elif run not in self._recovered:
            return run
        elif tags:
            self.store.set_tags(run, tags)
        self._recovered.discard(run)
        flat = {k: v for k, v in ticket.flat.items() if k != "train.seed"}
        self.store.log_params(run, flat)
        self.store.log_json(run, flat, C.RESOLVED_ARTIFACT.format(config_id=ticket.config_id))
        return run

    def trial_started(self, ticket: Ticket, tags: Mapping[str, str] | None = None,
                      config_tags: Mapping[str, str] | None = None) -> str:
        """The seed run of a trial (created once, nested under its config run; its params logged
        again on a run an earlier driver created, as for config runs). ``tags`` (the phase, the
        round of a seed schedule) are set on the run whenever they are given; ``config_tags`` (the
        phase) on its config run when that is made."""
        run = self._seeds.get(ticket.key)
        if run is None:
            parent = self.config_run(ticket, config_tags)
            run = self.store.start_run(self.experiment_id, f"{ticket.name}-seed{ticket.seed}", {
                C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: ticket.config_id, C.TAG_ROLE: ticket.role,
                C.TAG_SEED: str(ticket.seed), C.TAG_TRIAL_KEY: ticket.key, C.TAG_STUDY: self.study_name,
                **collection_tag(ticket.flat), **(tags or {})}, parent=parent)
            self._seeds[ticket.key] = run
        elif run not in self._recovered:
            if tags:
                self.store.set_tags(run, tags)
            return run
        else:
            self.config_run(ticket, config_tags)
        self._recovered.discard(run)
        self.store.log_params(run, dict(ticket.flat))
        if tags:
            self.store.set_tags(run, tags)
        return run

    def is_done(self, key: str) -> bool:
        return key in self._done

    def done_run(self, key: str) -> SeedRun | None:
        """The recorded seed run of a finished trial."""
        return self._done.get(key)

    def done_objectives(self) -> dict[str, float]:
        """Finished trials (by trial key) and the objective they reported."""
        return {k: float(r.metrics.get("objective", math.nan)) for k, r in self._done.items()}

    def train_point(self, ticket: Ticket, step: int, loss: float, lr: float) -> None:
        """One point of the training curve (`harness train`)."""
        self.store.log_metrics(self.trial_started(ticket), {"train_loss": loss, "lr": lr}, step=step)

    def dev_point(self, ticket: Ticket, step: int, metrics: Mapping[str, float]) -> None:
        """One point of the dev curve; a point at or before the last logged step is skipped (a
        retried trial re-reports from its checkpoint)."""
        if self.is_done(ticket.key):
            return
        run = self.trial_started(ticket)
        if step <= self._last_step.get(ticket.key, 0):
            return
        self._last_step[ticket.key] = step
        self.store.log_metrics(run, {f"{C.DEV_PREFIX}{k}": v for k, v in metrics.items()}, step=step)

    def trial_finished(self, ticket: Ticket, outcome: Outcome, per_query: PerQuery,
                       files: Iterable[tuple[str | os.PathLike[str], str | None]] = ()) -> None:
        """The final record of a seed run: test_<metric>, the outcome's other metrics, the per-query
        artifact, the evaluation fingerprint, ``files`` as artifacts ((local file, artifact folder)),
        then done and FINISHED. A trial already done is left as it is."""
        if self.is_done(ticket.key):
            return
        run = self.trial_started(ticket)
        logged = {k: float(v) for k, v in {**{f"{C.TEST_PREFIX}{k}": v for k, v in outcome.test.items()},
                                           **outcome.metrics}.items() if math.isfinite(float(v))}
        self.store.log_metrics(run, logged)
        self.store.log_per_query(run, per_query)
        for path, folder in files:
            self.store.log_file(run, path, folder)
        if outcome.evaluation:
            self.store.set_tags(run, {C.TAG_EVAL_FINGERPRINT: outcome.evaluation})
        self.store.set_tags(run, {C.TAG_DONE: "1"})
        self.store.end_run(run, "FINISHED")
        seed = SeedRun(run, ticket.config_id, str(ticket.seed), ticket.role, ticket.key, outcome.evaluation,
                       True, "FINISHED", unprefixed(logged, C.TEST_PREFIX), logged, 0)
        self._done[ticket.key] = seed
        self._test.setdefault(ticket.config_id, {})[ticket.seed] = dict(seed.test)

    def trial_failed(self, ticket: Ticket, error: str, status: str = "FAILED") -> None:
        """The seed run ends ``status`` (KILLED: stopped, not failed) with ``error`` as its tag."""
        if self.is_done(ticket.key):
            return
        run = self.trial_started(ticket)
        self.store.set_tags(run, {C.TAG_ERROR: error[:5000]})
        self.store.end_run(run, status)

    def done_seeds(self, config_id: str) -> list[int]:
        """The seeds of a configuration whose trials are recorded as finished, ascending."""
        return sorted(self._test.get(config_id, {}))

    def failed_trials(self, config_ids: Collection[str] | None = None) -> list[SeedRun]:
        """The seed runs that ended FAILED without their final record: trials that failed after
        their retries (``config_ids``: of those configurations only), in the order they started.
        Read from MLflow, so a trial that an earlier driver saw fail and this one finished is not
        among them."""
        runs = [s for s in map(SeedRun.of, iter_runs(self.store.client, self.experiment_id, C.KIND_TRIAL))
                if s.status == "FAILED" and not s.done and (config_ids is None or s.config_id in config_ids)]
        return sorted(runs, key=lambda s: (s.start_time, s.run_id))

    def seed_tests(self, config_id: str, seeds: Sequence[int]) -> dict[int, dict[str, float]] | None:
        """The test metrics of each of ``seeds`` of a configuration (without the test_ prefix), once
        every one is done and its config run exists; None before."""
        per_seed = self._test.get(config_id, {})
        if any(s not in per_seed for s in seeds) or config_id not in self._configs:
            return None
        return {s: dict(per_seed[s]) for s in seeds}

    def config_summary(self, config_id: str, summary: Mapping[str, float], seeds: Sequence[int]) -> None:
        """A configuration's summary over its seeds (``<metric>_mean``, ``<metric>_sd``: computed by
        the caller, harness.results.stored.summary_metrics) and the seeds it covers onto its
        config run; an undefined (NaN) value is not logged."""
        run = self._configs[config_id]
        self.store.log_metrics(run, summary)
        self.store.set_tags(run, {C.TAG_SEEDS: ",".join(map(str, seeds))})

    def config_report(self, config_id: str, metrics: Mapping[str, float], tags: Mapping[str, str]) -> bool:
        """A configuration's results against the baseline onto its config run (False: no such run)."""
        run = self._configs.get(config_id)
        if run is None:
            return False
        self.store.log_metrics(run, metrics)
        self.store.set_tags(run, tags)
        return True

    def study_artifacts(self, texts: Mapping[str, str] | None = None,
                        files: Iterable[tuple[str | os.PathLike[str], str | None]] = ()) -> None:
        """Text artifacts (by artifact path) and files ((local file, artifact folder)) on the study run."""
        run = self._require_study()
        for path, text in (texts or {}).items():
            self.store.log_text(run, text, path)
        for file, folder in files:
            self.store.log_file(run, file, folder)

    def references(self, maps: Mapping[str, float]) -> None:
        """Reference MAPs (bm25, random) on the test queries onto the study run."""
        self.store.log_metrics(self._require_study(),
                               {C.REFERENCE_METRIC.format(name=k): v for k, v in maps.items()})

    def verdict_view(self, metric: str) -> str:
        """The study's shared view of its runs table (conventions.TAG_VERDICT_VIEW): the config
        runs, sorted by ``test_<metric>`` (best first), with the Description column (each one's
        verdict) and ``test_<metric>``; returns its address (conventions.runs_page)."""
        column = f"metrics.`{C.TEST_PREFIX}{metric}`"
        view = {"searchFilter": f"tags.`{C.TAG_KIND}` = '{C.KIND_CONFIG}'", "orderByKey": column,
                "orderByAsc": False, "selectedColumns": ["attributes.`Description`", column]}
        self.store.client.set_experiment_tag(self.experiment_id, C.TAG_VERDICT_VIEW, json.dumps(view))
        return C.runs_page(self.experiment_id)

    def report_failed(self, reason: str) -> None:
        self.store.set_tags(self._require_study(), {C.TAG_REPORT_ERROR: reason[:5000]})

    def _require_study(self) -> str:
        if self._study is None:
            raise RuntimeError("study_started() must come first")
        return self._study

    @property
    def study_run(self) -> str | None:
        return self._study

    def recorded_configs(self, phase: str) -> set[str]:
        """The config ids an earlier driver recorded in ``phase`` (harness.phase)."""
        return {cid for cid, p in self._config_phase.items() if p == phase}

    def changed_keys(self, config_id: str, flats: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
        """(key, recorded, now) for each param of recorded configuration ``config_id`` that differs
        from the closest of ``flats`` (flat configs; the seed ignored), fewest differences first."""
        from harness.tracking.store import param_value

        recorded = self.store.client.get_run(self._configs[config_id]).data.params
        best: list[tuple[str, str, str]] | None = None
        for flat in flats:
            now = {k: param_value(v) for k, v in flat.items() if k != "train.seed"}
            diff = [(k, recorded.get(k, "(none)"), now.get(k, "(none)"))
                    for k in sorted(set(recorded) | set(now))
                    if k != "train.seed" and recorded.get(k) != now.get(k)]
            if best is None or len(diff) < len(best):
                best = diff
        return best or []

    def config_runs(self) -> dict[str, str]:
        return dict(self._configs)

    def study_tags(self, tags: Mapping[str, str]) -> None:
        self.store.set_tags(self._require_study(), tags)

    def end(self, status: str = "FINISHED", configs: Iterable[str] | None = None,
            study_status: str | None = None, failed: Collection[str] = ()) -> None:
        """End the config runs (``configs``: only those ids) with ``status``, those in ``failed``
        FAILED, and the study run with ``study_status`` (default: ``status``)."""
        for cid, run in self._configs.items():
            if configs is None or cid in configs:
                self.store.end_run(run, "FAILED" if cid in failed else status)
        if self._study:
            self.store.end_run(self._study, study_status or status)


def end_open_runs(store: TrackingStore, study_name: str, status: str) -> list[str]:
    """End every run of study ``study_name`` that is still RUNNING (its study run, config runs and
    seed runs) with ``status`` (FAILED, or KILLED for an interrupted driver); returns their ids.
    For the one driver of a study (it holds the study's lease) that stops before its end: no run
    of the study stays RUNNING after its driver has gone."""
    exp = store.client.get_experiment_by_name(study_name)
    if exp is None:
        return []
    ended = []
    for kind in (C.KIND_TRIAL, C.KIND_CONFIG, C.KIND_STUDY):
        for run in iter_runs(store.client, exp.experiment_id, kind):
            if run.info.status == "RUNNING":
                store.end_run(run.info.run_id, status)
                ended.append(run.info.run_id)
    return ended
