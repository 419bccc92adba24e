"""Orchestration of a study on Ray Tune: the lease, MLflow's study run, data preparation, Ray setup,
the phases and the report.

Phase "confirmation" (harness.driver._confirm), after the others: the top configurations by dev
and the baseline retrained with fresh seeds, as a grid of tickets, without early stopping.

Phase "fixed": the baseline and the named (or grid) configurations, each x every study seed, as a
Tune grid of tickets. Phase "search": an Optuna searcher proposes configurations and every proposal
runs once per study seed (harness.driver._searchers). Each (configuration, seed) is one trial
(harness.driver._trainable); trials checkpoint at their first evaluation and then at most every
``failure.checkpoint_every_s`` seconds, and a failed trial is retried from its last checkpoint
(FailureConfig). With ``resources.seeds_per_trial: k`` a trial trains k seeds of one configuration
(``group_tickets``; the searcher's repeats are then seed groups), each with its own seed run. The
driver callback (harness.driver._callback) is the one MLflow writer; it finds runs by their tags,
so a resumed study adds no duplicate runs. One driver per study: ``run_study`` holds the study's leases (harness.driver.lease) from before its first MLflow write to
its end.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ray import tune

from harness.driver import _early_stop_ray as early_stop_ray
from harness.driver import _state_trust as trust
from harness.driver._callback import Progress, TrackingCallback, cause_of, stderr
from harness.driver._confirm import run_confirmation
from harness.driver._final_report import ReportUnavailable, report_study
from harness.driver._rounds import run_rounds
from harness.driver._searchers import make_searcher
from harness.driver._signals import deferred_stops, install_stop_handlers, interrupts, stopped_by
from harness.driver._storage import file_names, report_storage
from harness.driver._trainable import NO_HOOKS, TrialHooks, trainable
from harness.driver.lease import Lease
from harness.errors import HarnessError
from harness.heap import frozen
from harness.redact import redact_uri
from harness.study.protocol import TICKET, TrialTicket, group_tickets
from harness.study.spec import StudySpec
from harness.study.variants import prepare_study, study_params, trial_count, trial_count_word, variant_key
from harness.tracking.conventions import PHASE_FIXED, TAG_DUPLICATE_OF
from harness.tracking.records import StudyRecords
from harness.tracking.system_metrics import SystemMetrics

# Experiment state is saved often, so a killed driver loses at most this much bookkeeping.
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")
# Search objectives such as cascade_cost exist only in a trial's final result (they need the best
# checkpoint); Tune would otherwise demand them in every intermediate dev report.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
# Tune's own SIGINT handler ends a run quietly and returns as if it had finished; the driver's
# (``interrupts``) stops it instead, so an interrupted study ends KILLED and says how to resume.
os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")


# Credentials Ray Tune would copy from the driver's environment into every trial actor's runtime_env
# (ray.tune.execution.class_cache), which Ray writes in plain text to its session logs
# (runtime_env_agent.log, raylet.out ...). Trials read credentials from their own process environment
# instead: a local Ray's workers inherit the driver's, a cluster's workers their node's (docs/cluster.md).
CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN")


def keep_credentials_out_of_runtime_env() -> None:
    """Stop Ray Tune from copying ``CREDENTIAL_ENV`` into the runtime_env of trial actors."""
    from ray.tune.execution import class_cache

    propagated = getattr(class_cache, "ENV_VARS_TO_PROPAGATE", None)
    if isinstance(propagated, set):
        propagated.difference_update(CREDENTIAL_ENV)


RAY_CONNECT_TIMEOUT_S = 5.0


def check_ray_address() -> None:
    """``$RAY_ADDRESS`` (host:port of a cluster's GCS, ``ray://host:port`` of a Ray Client server,
    ``auto`` or ``local``; never a job server's ``http://``) answers a TCP connection within ``RAY_CONNECT_TIMEOUT_S``; else one line,
    before anything is recorded. Ray's own connection retries for minutes in native code, deaf to
    SIGTERM; this probe is plain Python and bounded."""
    import socket

    address = os.environ.get("RAY_ADDRESS", "").strip()
    if not address or address in ("auto", "local"):
        return
    if address.lower().startswith(("http://", "https://")):
        raise HarnessError(f"RAY_ADDRESS={address} is a job server's address: harness run needs the "
                           "cluster's address (host:port of its GCS, e.g. 10.0.0.5:6379, or ray://host:port); "
                           "http:// addresses are for harness submit and harness jobs")
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise HarnessError(f"RAY_ADDRESS={address} is not host:port (a cluster's GCS, e.g. 10.0.0.5:6379) "
                           "or ray://host:port; unset it to run on a local Ray")
    try:
        with socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT_S) as sock:
            # Ray's GCS and its Client server speak gRPC; a port that answers otherwise (the
            # dashboard's 8265, an MLflow server) had ray.init retry for minutes. Under TLS
            # (RAY_USE_TLS) the plain-text greeting means nothing: the connection is all that is checked.
            grpc = os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true") or _answers_http2(sock)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise HarnessError(f"RAY_ADDRESS={address}: no Ray cluster answers there ({reason}, "
                           f"within {RAY_CONNECT_TIMEOUT_S:g} s); start it, fix the address, or unset "
                           "RAY_ADDRESS to run on a local Ray") from None
    if not grpc:
        raise HarnessError(f"RAY_ADDRESS={address}: something answers there, but not a Ray cluster (its "
                           "GCS, default port 6379, or a Ray Client server, ray://host:10001, speak gRPC); "
                           "fix the address, or unset RAY_ADDRESS to run on a local Ray")


# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)
_HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _answers_http2(sock: Any) -> bool:
    """Whether the server on ``sock`` answers HTTP/2's greeting as a gRPC server does: its first
    frame is SETTINGS (type 4). An HTTP/1 server answers with text, or closes. A server that says
    nothing within the socket's timeout raises TimeoutError (an OSError)."""
    sock.sendall(_HTTP2_GREETING)
    head = b""
    while len(head) < 9:
        chunk = sock.recv(9 - len(head))
        if not chunk:
            return False
        head += chunk
    return head[3] == 4


def init_ray(spec: StudySpec, num_gpus: float | None = None) -> None:
    """Attach to the cluster at ``$RAY_ADDRESS``, else start a local Ray that listens on loopback
    only (127.0.0.1: no port of it is reachable from another host) and is reaped when this driver
    dies, however it dies (harness.driver._reaper)."""
    import ray

    keep_credentials_out_of_runtime_env()
    if ray.is_initialized():
        return
    kw: dict[str, Any] = {"log_to_driver": False, "configure_logging": True, "logging_level": "ERROR"}
    if os.environ.get("RAY_ADDRESS"):
        check_ray_address()
        ray.init(**kw)
        install_stop_handlers()
        return
    from harness.driver._reaper import start_reaper

    start_reaper()  # before Ray starts: its processes inherit the reaper's mark
    try:
        init_local_ray(include_dashboard=False, num_gpus=num_gpus, **kw)
    finally:
        install_stop_handlers()


def init_local_ray(**kw: Any) -> None:
    """``ray.init(address="local", **kw)`` listening on loopback only (127.0.0.1): a study's Ray and
    the test suite's.

    ray.init turns a loopback _node_ip_address into the host's routable address unless Ray runs
    without cluster support (ray._private.services.resolve_ip_for_localhost); with that off for the
    start, GCS, raylet, agents and workers listen on 127.0.0.1 instead of 0.0.0.0."""
    import ray
    from ray._private import ray_constants

    cluster = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(address="local", _node_ip_address="127.0.0.1", **kw)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = cluster


def run_study(spec: StudySpec, *, resume: bool = False, progress: Progress | None = None,
              tracking_uri: str | None = None, num_gpus: float | None = None,
              hooks: TrialHooks = NO_HOOKS, resume_command: str | None = None,
              fresh: bool = False) -> dict[str, Any]:
    """Run (or, with ``resume``, finish) a study; returns per-config aggregates and the MLflow ids.

    One driver per study: the study's lease (harness.driver.lease) is taken before anything is
    recorded and released at the end, so a second driver is refused (``LeaseHeld``) and writes
    nothing. ``resume_command`` is what a refused driver is told to run once this one is gone.
    ``fresh`` discards Tune state of an earlier run (under the lease; `harness demo`): trials already
    recorded in MLflow are replayed from there. ``hooks``: test hooks of the trainable. Ends with
    ``ReportUnavailable`` (after every trial is recorded and the runs are ended) when the
    significance report could not be produced.

    A stop signal (SIGINT, SIGTERM, SIGHUP) raises ``StudyInterrupted``: every run of the study left
    RUNNING ends KILLED and the resume command is logged (docs/reliability.md).
    """
    from harness.tracking.store import default_tracking_uri

    log = progress or stderr
    uri = tracking_uri or spec.tracking_uri or default_tracking_uri()
    base = Path(spec.storage_path) if "://" not in spec.storage_path else None
    resume_line = resume_command or f"harness run {spec.path or 'STUDY'} --resume"
    with interrupts(), contextlib.ExitStack() as held:
        check_ray_address()  # before the first MLflow write
        if base is None:
            log(f"lease: Tune storage {spec.storage_path} is not a local path, so no lease file; the "
                "lease on the study's MLflow experiment guards it against a second driver")
        else:
            held.enter_context(Lease.on_file(base / f"{spec.name}.lease", study=spec.name, log=log,
                                          resume=resume_command or f"harness run {spec.path or 'STUDY'} --resume"))
        held.enter_context(store_lease(spec, uri, log, resume_command))
        try:
            return _drive(spec, resume, log, uri, num_gpus, hooks, fresh, resume_line=resume_line)
        except BaseException as exc:
            with deferred_stops():  # a second Ctrl-C must not leave the runs half-ended
                end_open_runs(spec, uri, exc, log)
                if isinstance(exc, KeyboardInterrupt | PhaseIncomplete):
                    log(f"study {spec.name}: interrupted before its end; finish it with: {resume_line}")
            stop = stopped_by(exc)  # the signal's number through Ray's plain KeyboardInterrupt
            if stop is not exc:
                raise stop from exc
            raise


class PhaseIncomplete(HarnessError):
    """A phase's Tune run returned with trials that neither finished nor failed."""


def store_lease(spec: StudySpec, uri: str, log: Progress, resume_command: str | None) -> Any:
    """The study's lease in the tracking store (harness.driver.lease), on its experiment
    (created here when new): what refuses a second driver started from another directory."""
    from harness.tracking.store import TrackingStore

    store = TrackingStore(uri)
    return Lease.on_experiment(store.client, store.experiment(spec.name), study=spec.name, where=redact_uri(uri), log=log,
                      resume=resume_command or f"harness run {spec.path or 'STUDY'} --resume")


def end_open_runs(spec: StudySpec, uri: str, exc: BaseException, log: Progress) -> None:
    """The driver stops before the study's end (``exc``): every run of the study it left RUNNING
    ends FAILED, or KILLED when it was interrupted (Ctrl-C). Only the holder of the study's lease
    gets here, so no other driver's runs are touched."""
    from mlflow.exceptions import MlflowException

    from harness.tracking.records import end_open_runs as end_runs
    from harness.tracking.store import TrackingStore

    status = "KILLED" if isinstance(exc, KeyboardInterrupt | SystemExit | PhaseIncomplete) else "FAILED"
    try:
        ended = end_runs(TrackingStore(uri), spec.name, status)
    except (HarnessError, MlflowException, OSError) as err:  # the store may be what failed: the original error matters
        log(f"could not end the study's MLflow runs ({type(err).__name__}: {str(err).splitlines()[0][:200]})")
        return
    if ended:
        log(f"study {spec.name}: {len(ended)} MLflow run(s) left running ended {status}")


def _drive(spec: StudySpec, resume: bool, log: Progress, tracking_uri: str | None,
           num_gpus: float | None, hooks: TrialHooks, fresh: bool, resume_line: str = "") -> dict[str, Any]:
    from harness.driver import _storage as storage
    from harness.tracking.store import TrackingStore, default_tracking_uri

    phases = spec.phases
    if fresh:
        for p in phases:
            storage.remove(spec.phase_dir(p))
    existing = [p for p in phases if storage.exists(spec.phase_dir(p))]
    if existing and not resume:
        raise HarnessError(f"study {spec.name!r} already has Ray Tune state at {spec.phase_dir(existing[0])}; "
                           "use `harness run STUDY --resume` to finish it, or change storage_path")
    uri = tracking_uri or spec.tracking_uri or default_tracking_uri()
    records = StudyRecords.open(TrackingStore(uri), spec.name)
    if existing and records.study_run is None:
        # Tune's state says trials ran, the store has no record of the study: replaying "finished"
        # trials from Tune would record nothing and call every trial recorded.
        raise HarnessError(f"study {spec.name!r} has Ray Tune state at {spec.phase_dir(existing[0])} but the "
                           f"MLflow store {redact_uri(uri)} has no record of it (wiped, or another "
                           "--tracking-uri?); resume against the store that recorded it, or delete the Tune "
                           "state to run the study again")
    if records.study_run is not None:
        # Tune restores the trials it holds, as they were, and the records hold an earlier driver's:
        # a study file or overrides (--set, --smoke; a default a newer harness changed) that now
        # describe other configurations would add trials beside them that no table of this file
        # can read (two baselines), or resume trials it cannot read, and end the study failed.
        fixed = spec.fixed_configs()
        other = records.recorded_configs(PHASE_FIXED) - {nc.config.config_id() for nc in fixed}
        if other:
            # What changed, for the recorded configuration closest to one of this file's (a changed
            # default of a newer harness shows here too): set those keys to resume.
            changed = records.changed_keys(min(other), [nc.config.to_flat() for nc in fixed])
            shown = "; ".join(f"{k}: recorded {old}, now {new}" for k, old, new in changed[:4]) or (
                "no parameter differs: an earlier harness trained it otherwise")
            more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
            raise HarnessError(f"study {spec.name!r}: {len(other)} of the configurations it recorded are not "
                               "in this study file with these overrides (--set, --smoke)"
                               f"{f' ({shown}{more})' if shown else ''}; resume with the file and overrides "
                               "it ran with (its MLflow study run holds the file, each config run its "
                               "parameters), or run the changed study under another name (or delete its "
                               "MLflow experiment)")
        if changed := changed_plan(records, spec):
            raise HarnessError(f"study {spec.name!r}: its MLflow study run recorded another plan "
                               f"({'; '.join(changed)}); resume with the file and overrides it ran with "
                               "(its study run holds the file), or run the changed study under another name "
                               "(or delete its MLflow experiment)")
    check_cpus_first(spec)
    if resume and records.study_run is not None:
        check_resume_state(spec, records)
    for kept, dup in records.remove_duplicates():
        log(f"study {spec.name}: seed run {dup.run_id} repeated finished seed run {kept.run_id} of "
            f"{dup.name or dup.trial_key} (two drivers of an older version); deleted it (tag "
            f"{TAG_DUPLICATE_OF}={kept.run_id}; `mlflow runs restore` brings it back)")
    study_run = records.study_started(study_text=spec.text, params=study_params(spec, trial_count(spec)))
    unavailable: ReportUnavailable | None = None
    # System metrics (CPU, memory, GPU where available) sample onto the study run until it ends.
    with SystemMetrics(study_run, uri, progress=log):
        log(f"study {spec.name}: {trial_count_word(spec)}{trial_count(spec)} trials "
            f"({len(spec.fixed_configs())} fixed configs"
            f"{f' + {spec.search.num_configs} from {spec.search.searcher}' if spec.search else ''} x seeds "
            f"{list(spec.seeds)}); MLflow experiment {spec.name!r} at {redact_uri(uri)}")
        prepared = prepare_study(spec, progress=log)
        # From here the prepared data and the imported modules only grow older: no full collection
        # walks them (harness.heap; benchmarks/results/driver_exit.md).
        with frozen():
            # A study over several collections: each collection's qrels in qrels/<collection>/.
            for nc in [spec.collection_configs(c)[0] for c in spec.collections] or [spec.baseline]:
                log_qrels(records, prepared[variant_key(nc.config)].splits, nc.config.data.collection)
            init_ray(spec, num_gpus=num_gpus)
            check_resources(spec)
            callback = TrackingCallback(spec, uri, records.experiment_id, progress=log, resume=resume_line)
            fn = tune.with_parameters(trainable, prepared=prepared, metric=spec.metric,
                                      finished=records.done_objectives(), hooks=hooks,
                                      checkpoint_every_s=spec.checkpoint_every_s, fuse=spec.fuse)
            fn = tune.with_resources(fn, {"cpu": spec.cpus, "gpu": spec.gpus})
            own: set[str] = set()  # this study's configurations: the ones its phases' trials ran
            if spec.seed_schedule is not None:  # seeds in rounds (harness.driver._rounds)
                own = run_rounds(spec, records, lambda phase, tickets: run_phase(
                    spec, phase, fn, callback, resume, tickets=tickets), log)
                callback.reload()  # rounds restored by Tune were recorded by their own callbacks
            else:
                for phase in phases:
                    if phase != "confirmation":
                        own |= run_phase(spec, phase, fn, callback, resume)
                        callback.reload()  # a phase Tune restored was recorded by its own callback
            if spec.confirm is not None:  # the pick retrained with fresh seeds (harness.driver._confirm)
                callback.reload()
                own |= run_confirmation(spec, callback.records, own, lambda phase, tickets: run_phase(
                    spec, phase, fn, callback, resume, tickets=tickets), log)
                callback.reload()
            callback.progress = log
            # Early stopping: tag stopped configurations, log the trial-steps saved; then where the
            # trials' checkpoints are and how much space they take.
            early_stop_ray.finish(spec, records.store, records.experiment_id, study_run,
                                  callback.records.config_runs(), log)
            report_storage(spec, records.store, study_run, log)
            if spec.models != "none":
                from harness.model.mlflow_model import log_study_models

                log_study_models(uri, records.experiment_id, spec.models, progress=log, config_ids=own)
            references = reference_maps(spec, prepared, callback.records, log)
            try:
                results = report_study(spec, callback.records, log)
            except ReportUnavailable as exc:
                unavailable, results = exc, {}
    for name, value in references.items():
        collection, _, kind = name.rpartition(".")
        log(f"reference on the same test queries{f' of {collection}' if collection else ''}: {kind} MAP {value:.4f}")
    if unavailable is not None:
        raise unavailable
    return {"experiment_id": records.experiment_id, "study_run": study_run, "configs": results,
            "tracking_uri": uri, "references": references}


def check_resources(spec: StudySpec) -> None:
    """A study whose trials ask for more GPUs or CPUs than a Ray started here has would wait for
    them forever (Tune only logs that no trial can start): refused in one line. A cluster
    (``$RAY_ADDRESS``) is not checked: its autoscaler may add nodes."""
    import ray

    if os.environ.get("RAY_ADDRESS"):
        return
    have = ray.cluster_resources()
    gpus = float(have.get("GPU", 0))
    if spec.gpus > gpus:
        raise HarnessError(f"study {spec.name!r}: each trial asks for resources.gpus {spec.gpus:g} but the "
                           f"local Ray has {gpus:g} GPU(s); run it where there is a GPU (or on a cluster: "
                           "RAY_ADDRESS), or set resources.gpus: 0 in the study file to train on CPU")
    _check_cpus(spec, float(have.get("CPU", 0)))


def check_cpus_first(spec: StudySpec) -> None:
    """``check_resources``' CPU check before anything is recorded or prepared (a study refused after
    its study run was made, its data built and its teachers trained ended FAILED for a number in its
    file): a local Ray not yet started has at most the CPUs this process may run on. Ray's own
    count (cgroup quotas) is checked again once it runs."""
    if os.environ.get("RAY_ADDRESS"):
        return
    import ray

    if ray.is_initialized():
        check_resources(spec)
        return
    _check_cpus(spec, float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _check_cpus(spec: StudySpec, cpus: float) -> None:
    if spec.cpus > cpus:
        raise HarnessError(f"study {spec.name!r}: each trial asks for resources.cpus {spec.cpus:g} but the "
                           f"local Ray has {cpus:g} CPU(s); lower resources.cpus in the study file to "
                           f"{cpus:g} or less, or run it on a cluster (RAY_ADDRESS)")


def log_qrels(records: StudyRecords, splits: Any, collection: str | None = None) -> None:
    """The study's judgements as TREC qrels on the study run (``qrels/dev.qrels``,
    ``qrels/test.qrels``; ``qrels/<collection>/`` for each collection of a study over several):
    with the seed runs' run files, what trec_eval and ir_measures read. One evaluation set per
    study (per collection), so any variant's splits give the same files."""
    import tempfile

    from harness.metrics.trec import qrels_artifacts, split_qrels

    with tempfile.TemporaryDirectory() as tmp:
        files = qrels_artifacts(tmp, split_qrels(splits))
        folder = "qrels" if collection is None else f"qrels/{collection}"
        records.study_artifacts(files=[(f, folder) for f in files])


def reference_maps(spec: StudySpec, prepared: dict[str, Any], records: StudyRecords,
                   log: Progress) -> dict[str, float]:
    """The first-stage (BM25) ranking and a random order on the baseline's test queries; over
    several collections on each collection's, named ``<collection>.bm25`` and so on."""
    from harness.training.baselines import reference_maps as maps

    out: dict[str, float] = {}
    for collection in spec.collections or (None,):
        baseline = spec.collection_configs(collection)[0] if collection else spec.baseline
        found = maps(prepared[variant_key(baseline.config)].splits.test)
        if "bm25" not in found:
            log(f"reference{f' ({collection})' if collection else ''}: no BM25 MAP (candidates carry no BM25 score)")
        out.update({f"{collection}.{k}" if collection else k: v for k, v in found.items()})
    records.references(out)
    return out


def fixed_tickets(spec: StudySpec) -> list[dict[str, Any]]:
    """The fixed phase's trials: every fixed configuration with every study seed, as Tune configs."""
    return [TrialTicket.of(nc.name, nc.role, nc.config, s).to_tune()
            for nc in spec.fixed_configs() for s in spec.seeds]


def make_scheduler(spec: StudySpec, phase: str) -> Any:
    """The Tune trial scheduler of a phase: early stopping over configurations where the study file
    turns it on (harness.driver._early_stop_ray), else None (Tune's FIFO, every trial runs to its
    end). It sees each trial's DevPoint results and its ticket in ``trial.config``."""
    return early_stop_ray.scheduler(spec)


# The study run's params that say which trials the study trains (harness.study.variants.study_params):
# a resumed study, or another run into its experiment, that changed one would add trials no table of
# the recorded file reads (seed 4 never trained, a table over seeds 1-3 while the file says 1-2).
PLAN_PARAMS = ("study.seeds", "study.seed_schedule", "study.searcher", "study.search_configs", "study.metric",
               "study.mode", "study.confirm_top", "study.confirm_seeds")


def changed_plan(records: StudyRecords, spec: StudySpec) -> list[str]:
    """"<key>: recorded <old>, now <new>" for each of ``PLAN_PARAMS`` the study run recorded and this
    study file (with its overrides) changes; a key the run lacks (an older harness) is not compared."""
    from harness.tracking.store import param_value

    if records.study_run is None:
        return []
    recorded = records.store.client.get_run(records.study_run).data.params
    now = {k: param_value(v) for k, v in study_params(spec, trial_count(spec)).items()}
    return [f"{k.removeprefix('study.')}: recorded {recorded[k]}, now {now.get(k, '(none)')}"
            for k in PLAN_PARAMS if k in recorded and recorded[k] != now.get(k, "(none)")]


def restorable(path: str) -> bool:
    """Whether Tune can restore the phase at ``path``. A driver stopped between writing tuner.pkl
    and Tune's first experiment state left a phase that cannot be: Tune would start it anew with one
    sample and call the phase finished after one trial. No state: no trial of the phase ran, so it
    starts as a first run would. Read through pyarrow, as Tune reads it: a local path or a URI
    (s3://), where a local glob would find nothing and start every phase of a bucket anew."""
    return tune.Tuner.can_restore(path) and any(
        n.startswith("experiment_state") and n.endswith(".json") for n in file_names(path))


def check_resume_state(spec: StudySpec, records: StudyRecords) -> None:
    """Before a resume records anything: every phase Tune would restore holds only state the
    study's driver signed (harness.driver._state_trust), and early stopping's state is one the
    harness wrote. A refusal here is one line and leaves the study's runs as they were (a finished
    study stays FINISHED), where found at its phase it ended the reopened study run FAILED."""
    for phase in spec.phases:
        path = spec.phase_dir(phase)
        if restorable(path):
            trust.verify(records.store, records.study_run or "", phase, path)
    if spec.early_stopping is not None:
        early_stop_ray.load_state(early_stop_ray.state_uri(spec), spec.early_stopping,
                                  early_stop_ray.min_groups(spec))


def run_phase(spec: StudySpec, phase: str, fn: Any, callback: TrackingCallback, resume: bool,
              tickets: list[dict[str, Any]] | None = None) -> set[str]:
    """Runs (or, with ``resume``, finishes) one phase with Tune; returns the config ids of its
    trials (those of an earlier driver included, on resume). ``tickets``: the trials of a round of
    a seed schedule (harness.driver._rounds), run as the fixed phase runs its own."""
    name = f"{spec.name}-{phase}"
    path = spec.phase_dir(phase)
    # The confirmation retrains what was picked: every trial runs to its end.
    scheduler = None if phase == "confirmation" else make_scheduler(spec, phase)
    if phase == "fixed" or tickets is not None:
        # One grid axis of whole tickets: Tune's config of a trial is {"ticket": {...}}.
        grid = group_tickets(tickets if tickets is not None else fixed_tickets(spec), spec.seeds_per_trial)
        param_space: dict[str, Any] = {"ticket": tune.grid_search([t["ticket"] for t in grid])}
        expected = len(grid)
        tune_config = tune.TuneConfig(max_concurrent_trials=spec.concurrency, reuse_actors=True,
                                      scheduler=scheduler)
    else:
        assert spec.search is not None
        param_space = {}
        searcher = make_searcher(spec)
        tune_config = tune.TuneConfig(search_alg=searcher, num_samples=spec.search.num_configs * searcher.repeat,
                                      max_concurrent_trials=spec.concurrency, reuse_actors=True,
                                      scheduler=scheduler)
        # a searcher may end early (harness.driver._searchers: proposals that only repeat known
        # configurations), so its phase has no fixed count; a stop before its first state is what
        # made one short (the restore below)
        expected = 0
    # Tune's state is pickles: restored only once verified as this driver's own (harness.driver._state_trust).
    records = callback.records
    signer = trust.Signer(records.store, records.study_run or "", phase)
    if resume and restorable(path):
        signer.files = trust.verify(records.store, records.study_run or "", phase, path)
        tuner = tune.Tuner.restore(path, trainable=fn, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space)
    else:
        run_config = tune.RunConfig(
            name=name, storage_path=spec.storage_path, callbacks=[callback], verbose=0,
            failure_config=tune.FailureConfig(max_failures=spec.max_retries),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1))
        tuner = tune.Tuner(fn, param_space=param_space, tune_config=tune_config, run_config=run_config)
    trust.sign_storage(signer, path)  # tuner.pkl, written to storage as the Tuner was made
    with trust.signing(signer, path):
        grid = tuner.fit()
    # Every trial of the phase ended: finished (or stopped early: TERMINATED too) or failed after
    # its retries. One that did neither makes the study incomplete, never a finished table.
    unfinished = len(grid) - grid.num_terminated - grid.num_errors
    if unfinished:
        raise PhaseIncomplete(f"phase {phase} of study {spec.name!r}: {unfinished} of {len(grid)} trial(s) "
                              "neither finished nor failed (Tune stopped early)")
    if len(grid) < expected:  # Tune ran fewer trials than the grid has: never a finished study
        raise PhaseIncomplete(f"phase {phase} of study {spec.name!r}: Tune ran {len(grid)} of its {expected} "
                              "trial(s)")
    errors = [r.error for r in grid if r.error is not None]
    if errors:
        first = cause_of(errors[0]) or str(errors[0]).splitlines()[0][:300]
        callback.log(f"{len(errors)} trial(s) of phase {phase} failed after retries; first error: {first}")
    return {TrialTicket.from_tune(r.config).config_id for r in grid if r.config and TICKET in r.config}
