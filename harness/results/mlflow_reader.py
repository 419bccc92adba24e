"""Read a study's results from MLflow through harness.tracking.records (read only).

experiment = study name. Seed runs (tag harness.kind=trial) carry harness.config_id, harness.seed,
harness.role, harness.eval_fingerprint (runs evaluated on different dev/test candidates are never
paired: StudyResults refuses them), final metrics test_<metric> and the per-query artifact per_query/test.csv (columns qid,
measure, value; measure as a harness metric name, ir_measures' names are accepted too). Config runs
(harness.kind=config) name their configuration: the table labels a configuration by its config run's
run name (by its config_id where no config run exists). The baseline is the configuration whose role
is ``baseline`` unless one is named. Only FINISHED seed runs count. The metrics are the harness's
(metrics.METRIC_KEYS = conventions.METRICS) and any other measure of the per-query artifact; other
test_* keys (a cost, a loss) are not tabulated. A configuration stopped early (its config run tagged
harness.stopped=1) is left out, even the seeds it finished; ``StudyResults.stopped`` names it for
the table's footnote. A configuration of a seed schedule (config run tagged harness.sequential)
may have the first of the baseline's seeds only; the tag says why it got no more.

One command, one read: the runs come from a ``harness.tracking.snapshot.ExperimentSnapshot`` (an
SQLite store read directly, without importing MLflow's client); inside ``one_read()`` every reader
here shares one snapshot per store and experiment (the table, its incomplete-study note and the
report's record read the runs once).

An http(s) tracking URI is pinged first and MLflow's retries are cut (FAST_FAIL_ENV): an unreachable
server fails within seconds with "tracking URI ... is not reachable", not after minutes of retries.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import sqlite3
import sys
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from harness.errors import DataError, HarnessError, UnknownName, shown
from harness.metrics.measures import METRIC_KEYS, metric_key
from harness.results.stored import RunRecord, StudyResults, order_seeds
from harness.textfile import unprintable
from harness.tracking import conventions as C
from harness.tracking.records import SeedRun, local_artifact, read_per_query
from harness.tracking.snapshot import DELETED, ExperimentSnapshot, SqliteSnapshot, sqlite_experiment
from harness.tracking.store import check_existing_store, default_tracking_uri, sqlite_path

# MLflow's client retries a failing request for minutes; a read that fails mid-way should not. A
# user's own settings of these variables win.
FAST_FAIL_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


PHASES = ("auto", "confirmatory", "exploratory")
CONFIRMATORY_NOTE = ("Confirmatory: the confirmation phase's runs only, the configurations picked by their "
                     "dev objective and the baseline retrained with fresh seeds (the runs that picked them: "
                     "--phase exploratory).")
EXPLORATORY_NOTE = ("Exploratory: the runs that picked the confirmed configurations, whose differences on "
                    "them are biased upward by the pick; cite the confirmatory table (--phase confirmatory).")


def read_experiment(name: str, *, tracking_uri: str | None = None, baseline: str | None = None,
                    config_ids: Collection[str] | None = None, phase: str = "auto") -> StudyResults:
    """The results of MLflow experiment ``name`` (module docstring); with ``config_ids``, only the
    seed runs of those configurations (a study file edited between runs leaves the old
    configurations in its experiment). ``phase``: in a study with a confirmation phase (config runs
    tagged harness.phase=confirmation), ``confirmatory`` reads the confirmation's runs only,
    ``exploratory`` every other run, ``auto`` the confirmatory one where there is one; the result
    carries the phase (its tables' titles) and a footnote sentence on it."""
    _check_phase(phase)
    with _env_defaults(**FAST_FAIL_ENV):
        snapshot, uri = open_experiment(name, tracking_uri)
        return _read(snapshot, name, uri, baseline, config_ids, phase)


def _check_phase(phase: str) -> None:
    """``phase`` is one of PHASES (`--phase`, ``load_study(phase=)``), refused before the store is read."""
    if phase not in PHASES:
        raise UnknownName("phase", phase, PHASES)


_SHARED: contextvars.ContextVar[dict[tuple[str, str], tuple[ExperimentSnapshot, str]] | None] = (
    contextvars.ContextVar("harness_one_read", default=None))


@contextlib.contextmanager
def one_read() -> Iterator[None]:
    """Inside the block, every read of one experiment of one store here (read_experiment,
    read_experiment_collections, incomplete_note, study_record.read_study_record) shares one
    snapshot of its runs: the store is read once. For a command that reads a finished study;
    runs written during the block are not seen."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def store_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a read of the store raises: sqlite3's, and MLflow's where MLflow was imported
    (importing it only to name its exception would cost what the direct read saves)."""
    mlflow_exceptions = sys.modules.get("mlflow.exceptions")
    return (sqlite3.Error, *((mlflow_exceptions.MlflowException,) if mlflow_exceptions else ()))


def open_experiment(name: str, tracking_uri: str | None) -> tuple[ExperimentSnapshot, str]:
    """The runs of MLflow experiment ``name`` (a snapshot, harness.tracking.snapshot) and the store's
    URI; the store checked as ``open_store`` checks it, an unknown experiment one line listing the
    experiments there."""
    uri = tracking_uri or default_tracking_uri()
    shared = _SHARED.get()
    if shared is not None and (uri, name) in shared:
        return shared[(uri, name)]
    check_existing_store(uri)  # a missing or damaged store, an unreachable server: one line, at once
    db = sqlite_path(uri)
    try:
        found = sqlite_experiment(db, name) if db is not None else None
        if db is not None and found is not None:
            exp_id, names = found
            if exp_id is None:
                raise DataError(f"unknown MLflow experiment {name!r} at {uri}; experiments there: "
                                f"{', '.join(names) or 'none'}")
            if exp_id == DELETED:
                raise DataError(_deleted(name, uri))
            snapshot: ExperimentSnapshot = SqliteSnapshot(db, exp_id, lambda: _client(uri))
        else:
            client = _client(uri)
            snapshot = ExperimentSnapshot(experiment_named(client, name, uri).experiment_id, lambda: client)
    except store_errors() as exc:
        raise DataError(f"tracking URI {uri}: {str(exc).splitlines()[0]}") from None
    if shared is not None:
        shared[(uri, name)] = (snapshot, uri)
    return snapshot, uri


def _refuse_duplicates(trials: list[SeedRun], source: str, uri: str) -> None:
    """One line naming a seed that has two finished seed runs (two drivers of an older version ran
    the study at once) and how `harness run --resume` repairs it."""
    seen: dict[tuple[str | None, str | None], SeedRun] = {}
    for run in sorted(trials, key=lambda t: (t.start_time, t.run_id)):
        first = seen.setdefault((run.config_id, run.seed), run)
        if first is not run:
            raise DataError(f"{source} at {uri}: seed {run.seed} of configuration {run.config_id} has two "
                            f"finished seed runs, {first.run_id} and {run.run_id} (two drivers ran the study "
                            "at once); `harness run STUDY --resume` keeps the first and deletes the other")


def open_store(tracking_uri: str | None) -> tuple[Any, str]:
    """A read-only ``MlflowClient`` on ``tracking_uri`` (default: default_tracking_uri()) and the
    URI: a missing SQLite store or an unreachable server fails at once, in one line."""
    uri = tracking_uri or default_tracking_uri()
    check_existing_store(uri)  # a missing or damaged store, an unreachable server: one line, at once
    return _client(uri), uri


def _client(uri: str) -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise HarnessError("reading MLflow needs mlflow: pip install 'mlflow>=3.17,<3.19'") from None
    return MlflowClient(tracking_uri=uri)


def experiment_named(client: Any, name: str, uri: str) -> Any:
    """The MLflow experiment ``name``; a one-line DataError listing the experiments there if none."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        known = sorted(e.name for e in client.search_experiments())
        raise DataError(f"unknown MLflow experiment {name!r} at {uri}; experiments there: "
                        f"{', '.join(known) or 'none'}")
    if exp.lifecycle_stage != "active":
        raise DataError(_deleted(name, uri))
    return exp


def _deleted(name: str, uri: str) -> str:
    """The refusal of an experiment in MLflow's trash: read as if live, it was tabulated and
    exported without a word while MLflow lists it nowhere."""
    return (f"MLflow experiment {name!r} at {uri} is deleted (in MLflow's trash); restore it to read it: "
            f"`mlflow experiments restore --experiment-id ID` with MLFLOW_TRACKING_URI={uri}")


def read_experiment_collections(name: str, *, tracking_uri: str | None = None, baseline: str | None = None,
                                config_ids: Collection[str] | None = None, phase: str = "auto"
                                ) -> dict[str, StudyResults]:
    """``read_experiment`` per collection: a study over several collections (config runs tagged
    harness.collection) gives collection -> its results, in the order its collections' first
    config runs started; any other study one entry named ``""``."""
    _check_phase(phase)
    with _env_defaults(**FAST_FAIL_ENV):
        snapshot, uri = open_experiment(name, tracking_uri)
        try:
            runs = sorted(snapshot.runs(C.KIND_CONFIG), key=lambda r: r.info.start_time or 0)
        except store_errors() as exc:
            raise DataError(f"tracking URI {uri}: {str(exc).splitlines()[0]}") from None
        groups: dict[str, set[str]] = {}
        for r in runs:
            cid = r.data.tags.get(C.TAG_CONFIG_ID, r.info.run_id)
            if config_ids is None or cid in config_ids:
                collection = r.data.tags.get(C.TAG_COLLECTION, "")
                bad = unprintable(collection)
                if bad:  # a collection's name heads a table's columns
                    raise DataError(f"MLflow experiment {name!r}: config run {r.info.run_id} ({r.info.run_name}): "
                                    f"its {C.TAG_COLLECTION} tag {shown(collection)} holds {bad}; set it back "
                                    "(MLflow UI) to the study file's collection name")
                groups.setdefault(collection, set()).add(cid)
        if set(groups) <= {""}:
            return {"": _read(snapshot, name, uri, baseline, config_ids, phase)}
        if "" in groups:  # left out, that configuration's result on its collection went unsaid
            r = next(r for r in runs if r.data.tags.get(C.TAG_CONFIG_ID, r.info.run_id) in groups[""]
                     and not r.data.tags.get(C.TAG_COLLECTION))
            raise DataError(f"MLflow experiment {name!r}: config run {r.info.run_id} ({r.info.run_name}) has no "
                            f"{C.TAG_COLLECTION} tag, while the study's others name their collection "
                            f"({', '.join(c for c in groups if c)}); set the tag back (MLflow UI) to read it")
        return {collection: _read(snapshot, name, uri, baseline, ids, phase, collection=collection)
                for collection, ids in groups.items() if collection}


def _read(snapshot: ExperimentSnapshot, name: str, uri: str, baseline: str | None,
          config_ids: Collection[str] | None, phase: str = "auto", collection: str = "") -> StudyResults:
    source = f"MLflow experiment {name!r}" + (f" collection {collection!r}" if collection else "")
    try:
        configs = {r.data.tags.get(C.TAG_CONFIG_ID, r.info.run_id): r for r in snapshot.runs(C.KIND_CONFIG)}
        confirmed = {cid for cid, r in configs.items() if r.data.tags.get(C.TAG_PHASE) == C.PHASE_CONFIRMATION}
        if phase == "auto":
            phase = "confirmatory" if confirmed else ""
        if phase == "confirmatory" and not confirmed:
            raise DataError(f"{source} at {uri} has no confirmation runs (config runs tagged "
                            f"{C.TAG_PHASE}={C.PHASE_CONFIRMATION}); leave out --phase")
        if phase:
            keep = confirmed if phase == "confirmatory" else set(configs) - confirmed
            config_ids = keep if config_ids is None else set(config_ids) & keep
        stopped = {cid: r for cid, r in configs.items() if r.data.tags.get(C.TAG_STOPPED) == "1"
                   and (config_ids is None or cid in config_ids)}
        trials = [t for t in map(SeedRun.of, snapshot.runs(C.KIND_TRIAL)) if t.status == "FINISHED"
                  and (config_ids is None or t.config_id in config_ids) and t.config_id not in stopped]
        if not trials:
            raise DataError(f"{source} at {uri} has no finished seed runs "
                            f"({C.TAG_KIND}={C.KIND_TRIAL}); nothing to tabulate")
        _refuse_duplicates(trials, source, uri)
        labels = _labels(configs, trials)
        started: dict[str, int] = {}  # study order: when each configuration's first run started
        records, roles = [], {}
        lost: dict[str, str] = {}  # run id -> artifact root: a finished run without its per-query file
        with tempfile.TemporaryDirectory() as tmp, _env_defaults(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"):
            for run in trials:
                config_id, seed = run.config_id, run.seed
                if not config_id or seed is None:
                    raise DataError(f"{source}: seed run {run.run_id} lacks the "
                                    f"{C.TAG_CONFIG_ID} or {C.TAG_SEED} tag")
                label = labels[config_id]
                config_run = configs.get(config_id)
                role = (config_run.data.tags.get(C.TAG_ROLE) if config_run else None) or run.role
                roles[label] = role
                first = (config_run.info.start_time or 0) if config_run else run.start_time
                started[label] = min(started.get(label, first), first)
                per_query = read_per_query(_Lazy(snapshot.client), run.run_id, tmp, source, metric_key,
                                           run.artifact_uri)
                if per_query is None:
                    if run.done:
                        lost[run.run_id] = run.artifact_uri
                    per_query = {}
                values = {m: v for m, v in run.test.items() if m in METRIC_KEYS or m in per_query}
                records.append(RunRecord(config=label, seed=str(seed), values=values,
                                         per_query=per_query, config_id=config_id,
                                         evaluation=run.evaluation, run_id=run.run_id))
    except store_errors() as exc:
        raise DataError(f"tracking URI {uri}: {str(exc).splitlines()[0]}") from None
    _refuse_partly_per_query(records, source)
    _refuse_lost_per_query(records, lost, source)
    why = _why_unfinished(snapshot, uri)
    finished = {t.config_id for t in trials}
    unrun = [(cid, r) for cid, r in sorted(configs.items(), key=lambda kv: kv[1].info.start_time or 0)
             if cid not in finished and cid not in stopped and (config_ids is None or cid in config_ids)]
    if unrun and not why:
        cid, r = unrun[0]
        raise DataError(f"{source}: configuration {r.info.run_name or cid!r} (config run {r.info.run_id}) has no "
                        "finished seed run in a finished study (its seed runs deleted?): the table and its "
                        "correction would leave it out without a word; restore its seed runs, or delete its "
                        "config run too to leave it out")
    if baseline is None:
        waiting = [r.info.run_name or cid for cid, r in unrun if r.data.tags.get(C.TAG_ROLE) == C.ROLE_BASELINE]
        if waiting and not any(role == C.ROLE_BASELINE for role in roles.values()):
            raise DataError(f"{source}: the baseline {waiting[0]!r} has no finished seed run yet; a table "
                            f"compares to it ({_finishes(snapshot)} finishes the study)")
        bases = sorted({label for label, role in roles.items() if role == C.ROLE_BASELINE})
        if len(bases) != 1:
            found = f"{len(bases)} ({', '.join(bases)})" if bases else "none"
            raise DataError(f"{source}: expected one configuration with {C.TAG_ROLE}={C.ROLE_BASELINE}, "
                            f"found {found}; name one with --baseline")
        baseline = bases[0]
    records.sort(key=lambda r: (r.config != baseline, started[r.config], r.config))
    # A seed schedule's configurations (tag harness.sequential): each has the seeds it received.
    sequential = {labels[cid]: r.data.tags[C.TAG_SEQUENTIAL] for cid, r in
                  sorted(configs.items(), key=lambda kv: kv[1].info.start_time or 0)
                  if cid in labels and C.TAG_SEQUENTIAL in r.data.tags}
    left_out = ""
    if why:
        # configurations of this table (its phase's) with no finished seed run at all: named too
        records, left_out = _paired_part(records, baseline, sequential, [r.info.run_name or cid for cid, r in unrun])
    results = StudyResults.build(records, baseline=baseline, source=source, metric_order=METRIC_KEYS,
                                 sequential=sequential)
    if phase and confirmed:
        results = dataclasses.replace(results, phase=phase, phase_note=(
            CONFIRMATORY_NOTE if phase == "confirmatory" else EXPLORATORY_NOTE))
    if left_out:
        results = dataclasses.replace(results, phase_note=f"{results.phase_note} {left_out}".strip())
    if stopped:
        results = dataclasses.replace(results, stopped={
            (r.info.run_name or cid): f"at step {r.data.tags.get(C.TAG_STOPPED_RUNG, '?')}: "
                                      f"{r.data.tags.get(C.TAG_STOPPED_REASON, 'stopped early')}"
            for cid, r in sorted(stopped.items(), key=lambda kv: kv[1].info.start_time or 0)})
    return results


def _refuse_partly_per_query(records: Sequence[RunRecord], source: str) -> None:
    """Per-query values on some seed runs and not others: refused, naming a run without. Tabulated,
    the table fell back to the across-seeds test for every configuration (``has_per_query`` asks
    every run), and ``--test crossed`` said the study had per-run values only."""
    lacking = [r for r in records if not r.per_query]
    if lacking and len(lacking) < len(records):
        r = lacking[0]
        raise DataError(f"{source}: seed run {r.run_id} ({r.config}, seed {r.seed}) has no {C.PER_QUERY_ARTIFACT}, "
                        f"while {len(records) - len(lacking)} of the {len(records)} seed runs have one: the "
                        "tests pair per-query values; restore the artifact (or the run)")


def _refuse_lost_per_query(records: Sequence[RunRecord], lost: Mapping[str, str], source: str) -> None:
    """Seed runs the harness finished (tag harness.done), every one without the per-query file it
    logs with each: the store was copied without its artifact folder, or the folder moved. Read as
    a study with per-run values only, the table ran the across-seeds test in place of the crossed
    one, and power said the study had no per-query values, without a word."""
    if not lost or any(r.per_query for r in records):
        return
    r = next(r for r in records if r.run_id in lost)
    root = lost[r.run_id]
    local = local_artifact(root, "")
    where = (f"its artifact folder {local} is not there (the store was copied or moved without it?)"
             if local is not None and not local.is_dir() else f"not under its artifact root {root}")
    raise DataError(f"{source}: seed run {r.run_id} ({r.config}, seed {r.seed}) has no {C.PER_QUERY_ARTIFACT}, "
                    f"which the harness logs with every finished seed run ({len(lost)} of the {len(records)} lack "
                    f"it): {where}; restore the artifacts beside the store")


def _why_unfinished(snapshot: ExperimentSnapshot, uri: str) -> list[str]:
    """What makes the study not a finished one, in phrases (none: it is finished): its study run
    did not end FINISHED, or some of its seed runs did not finish."""
    try:
        studies = [r.info.status for r in snapshot.runs(C.KIND_STUDY)]
        # a seed run that early stopping ended (KILLED, tagged stopped) finished as the study meant
        seeds = [r.info.status for r in snapshot.runs(C.KIND_TRIAL) if r.data.tags.get(C.TAG_STOPPED) != "1"]
    except store_errors() as exc:
        raise DataError(f"tracking URI {uri}: {str(exc).splitlines()[0]}") from None
    why = []
    if studies and "FINISHED" not in studies:
        state = {"RUNNING": "is still running (or its driver was killed)", "KILLED": "was interrupted (KILLED)",
                 "FAILED": "ended FAILED"}.get(studies[0], f"is {studies[0]}")
        why.append(f"its study run {state}")
    left = [s for s in seeds if s != "FINISHED"]
    if left:
        why.append(f"{len(left)} of {len(seeds)} seed runs did not finish ({', '.join(sorted(set(left)))})")
    return why


def _paired_part(records: list[RunRecord], baseline: str, sequential: Mapping[str, str],
                 unrun: Sequence[str] = ()) -> tuple[list[RunRecord], str]:
    """The part of an unfinished study a table can pair: every configuration that has finished
    each of the baseline's finished seeds, on those seeds; a configuration still missing one is
    left out (named in the sentence returned), as are seeds the baseline has not finished. A seed
    schedule's configurations keep their own rule (StudyResults.build)."""
    seeds = {r.seed for r in records if r.config == baseline}
    have: dict[str, set[str]] = {}
    for r in records:
        have.setdefault(r.config, set()).add(r.seed)
    out = [r for r in records if r.config in sequential or r.config == baseline
           or (seeds <= have[r.config] and r.seed in seeds)]
    dropped = {c: order_seeds(list(seeds - got)) for c, got in have.items()
               if c != baseline and c not in sequential and not seeds <= got}
    beyond = order_seeds(list({r.seed for r in records if r.seed not in seeds and r.config not in sequential}))
    parts = [f"{c} (seed {', '.join(missing)} not finished)" for c, missing in dropped.items()]
    parts += [f"{c} (no seed run finished)" for c in unrun]
    if beyond:
        parts.append(f"seed {', '.join(beyond)} (not finished by the baseline)")
    return out, (f"Left out until it is resumed: {'; '.join(parts)}." if parts else "")


def incomplete_note(name: str, *, tracking_uri: str | None = None) -> str:
    """Why study ``name`` is not a finished study, in one sentence ("" when it is): its study run did
    not end FINISHED (still running, interrupted: KILLED, or FAILED) or some of its seed runs did
    not finish. A table of such a study shows only what was recorded (docs/reliability.md)."""
    with _env_defaults(**FAST_FAIL_ENV):
        snapshot, uri = open_experiment(name, tracking_uri)
        why = _why_unfinished(snapshot, uri)
    if not why:
        return ""
    return (f"INCOMPLETE study: {' and '.join(why)}; this table holds only the finished seed runs "
            f"({_finishes(snapshot)} finishes it).")


def _finishes(snapshot: ExperimentSnapshot) -> str:
    """What finishes the study, as a sentence's subject: `harness run STUDY --resume`, or, for an
    experiment `harness train` made (its study run's tag harness.origin), that command again."""
    if any(r.data.tags.get(C.TAG_ORIGIN) == C.ORIGIN_TRAIN for r in snapshot.runs(C.KIND_STUDY)):
        return "its `harness train` command again, with --resume where it kept a --checkpoint-dir,"
    return "`harness run STUDY --resume`"


def with_note(results: StudyResults, note: str) -> StudyResults:
    """``results`` whose tables' notes carry ``note`` (``incomplete_note``'s; none when empty)."""
    if not note:
        return results
    return dataclasses.replace(results, phase_note=f"{note} {results.phase_note}".strip(), incomplete=note)


@contextlib.contextmanager
def _env_defaults(**values: str) -> Iterator[None]:
    """Set environment variables the user has not set, for the block only. Used for no
    artifact-download progress bars (the CLI's stderr is for one-line errors) and FAST_FAIL_ENV."""
    saved = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)


class _Lazy:
    """MLflow's client, made on its first use (a run whose artifacts are not in a local folder)."""

    def __init__(self, make: Any) -> None:
        self._make = make

    def __getattr__(self, name: str) -> Any:
        return getattr(self._make(), name)


def _labels(configs: dict[str, Any], trials: list[SeedRun]) -> dict[str, str]:
    """config_id -> label: the config run's label (tag harness.label, the study file's ``label``),
    else its name, made unique with the config_id where they clash."""
    ids = sorted({t.config_id or "" for t in trials} - {""})
    names = {i: (configs[i].data.tags.get(C.TAG_LABEL) or configs[i].info.run_name
                 if i in configs and (configs[i].info.run_name or configs[i].data.tags.get(C.TAG_LABEL))
                 else i) for i in ids}
    for i, n in names.items():
        bad = unprintable(n)  # a table's row name is one line of printable text (as a long CSV's names are)
        if bad:
            raise DataError(f"configuration {i}: its name {shown(n)} holds {bad}, and a name is one line of "
                            f"printable text in a table; rename its config run (MLflow UI) or its {C.TAG_LABEL} tag")
    clashes = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {i: f"{n} [{i}]" if n in clashes else n for i, n in names.items()}
