"""The Ray Tune glue: the only module that imports ray.tune.

Phase "fixed": the baseline and the named (or grid) configurations, each x every study seed, as a
Tune grid. Phase "search": an Optuna searcher proposes configurations; ``SeedRepeater`` runs every
proposal once per study seed (config["__trial_index__"] picks the seed) and reports the mean over
seeds to Optuna. Each (configuration, seed) is one trial; trials checkpoint at every evaluation and a
failed trial is retried from its last checkpoint (FailureConfig). A driver-side callback is the one
MLflow writer; it finds runs by their tags, so a resumed study adds no duplicate runs.
One driver per study: ``run_study`` holds the study's lease (harness.study.lease) from before
its first MLflow write to its end.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from ray import tune
from ray.tune.search import Repeater

from harness.config import TrialConfig
from harness.errors import HarnessError
from harness.study import early_stop_ray
from harness.study.lease import StudyLease
from harness.study.prepare import prepare_study, study_params, trial_count, variant_key
from harness.study.report import ReportUnavailable, report_study
from harness.study.space import suggest
from harness.study.spec import StudySpec
from harness.tracking.study_writer import StudyWriter, TrialIdentity
from harness.tracking.system_metrics import SystemMetrics

Progress = Callable[[str], None]
# Experiment state is saved often, so a killed driver loses at most this much bookkeeping.
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")
# Search objectives such as cascade_cost exist only in a trial's final result (they need the best
# checkpoint); Tune would otherwise demand them in every intermediate dev report.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")


# -- trial identity ------------------------------------------------------------------------------

def identify(config: Mapping[str, Any], defaults: Mapping[str, Any], seeds: tuple[int, ...],
             searcher: str) -> TrialIdentity:
    """The (configuration, seed) a Tune trial config stands for, on the driver and in the trial."""
    if "trial" in config:
        t = config["trial"]
        cfg = TrialConfig.from_flat(t["flat"])
        return TrialIdentity(cfg.config_id(), t["name"], t["role"], int(t["seed"]), cfg.with_seed(t["seed"]).to_flat())
    seed = seeds[int(config.get("__trial_index__", 0))]
    flat = {k: v for k, v in config.items() if "." in k}
    cfg = TrialConfig.from_flat(flat, base=TrialConfig.from_flat(dict(defaults)))
    cid = cfg.config_id()
    return TrialIdentity(cid, f"{searcher}-{cid[:6]}", "candidate", seed, cfg.with_seed(seed).to_flat())


# -- the trainable (runs in Ray workers) ---------------------------------------------------------

def trainable(config: dict[str, Any], *, prepared: dict[str, Any], defaults: dict[str, Any],
              seeds: tuple[int, ...], searcher: str, metric: str, hooks: dict[str, str],
              finished: dict[str, float]) -> None:
    import torch

    from harness.training.loop import EvalRecord, FinalRecord, Trainer

    ident = identify(config, defaults, seeds, searcher)
    if ident.key in finished:
        # Recorded as finished in MLflow by an earlier driver (the source of truth on resume), even if
        # Tune's own snapshot had not caught up when that driver died: replay, never retrain.
        if hooks.get("trial_log"):
            with open(hooks["trial_log"], "a") as fh:
                fh.write(f"{ident.key} replay\n")
        tune.report({"final": True, "replayed": True, "trial_key": ident.key,
                     "objective": finished[ident.key]})
        return
    cfg = TrialConfig.from_flat(dict(ident.flat))
    cpus = max(1, int(os.environ.get("OMP_NUM_THREADS") or 1))
    torch.set_num_threads(cpus)
    data = prepared[variant_key(cfg)]
    trainer = Trainer(cfg, data)
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            trainer.restore(d)
    if hooks.get("trial_log"):
        with open(hooks["trial_log"], "a") as fh:
            fh.write(f"{ident.key} start {trainer.step}\n")
    fail_dir = hooks.get("fail_once_dir")
    started = time.time()
    for rec in trainer.run():
        if isinstance(rec, EvalRecord):
            with tempfile.TemporaryDirectory() as d:
                trainer.save(d)
                tune.report({"step": rec.step, **{f"dev_{k}": v for k, v in rec.metrics.items()},
                             **{f"best_dev_{k}": v for k, v in trainer.best_dev.items()},
                             "objective": rec.best_value, "trial_key": ident.key},
                            checkpoint=tune.Checkpoint.from_directory(d))
            marker = Path(fail_dir, ident.key) if fail_dir else None
            if marker is not None and not marker.exists():
                marker.touch()
                raise RuntimeError(f"injected failure in {ident.key} at step {rec.step} (testing hook)")
        elif isinstance(rec, FinalRecord):
            # rec.dev is the best-dev checkpoint's dev metrics, selected by train.select_metric,
            # which a study sets to its objective metric: the same value every dev report carried.
            result = {"step": trainer.step, "objective": rec.dev.get(metric, rec.dev[cfg.train.select_metric]),
                      "eval_fingerprint": data.splits.evaluation,
                      **{f"test_{k}": v for k, v in rec.metrics.items()},
                      "best_step": rec.best_step, "trial_key": ident.key,
                      "per_query_json": json.dumps(rec.per_query), "resolved_json": json.dumps(rec.resolved),
                      "started": started, "ended": time.time(), "final": True}
            result.update({f"best_dev_{k}": v for k, v in rec.dev.items()})
            result.update(rec.cascade)
            tune.report(result)
            if hooks.get("trial_log"):
                with open(hooks["trial_log"], "a") as fh:
                    fh.write(f"{ident.key} end {trainer.step}\n")


# -- the driver-side writer ----------------------------------------------------------------------

class TrackingCallback(tune.Callback):
    """Writes every trial to MLflow from the driver and prints progress; picklable (the writer is
    rebuilt after a restore from the tags already in MLflow)."""

    def __init__(self, spec: StudySpec, uri: str, experiment_id: str, progress: Progress | None = None) -> None:
        self.spec = spec
        self.uri = uri
        self.experiment_id = experiment_id
        self.defaults = spec.defaults.to_flat()
        self.searcher = spec.search.searcher if spec.search else "grid"
        self._writer: StudyWriter | None = None
        self.progress = progress
        self.total = trial_count(spec)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_writer"] = None
        state["progress"] = None
        return state

    @property
    def writer(self) -> StudyWriter:
        if self._writer is None:
            from harness.tracking.store import TrackingStore

            self._writer = StudyWriter(TrackingStore(self.uri), self.experiment_id, self.spec.name)
        return self._writer

    def _log(self, msg: str) -> None:
        (self.progress or _stderr)(msg)

    def _ident(self, trial: Any) -> TrialIdentity:
        return identify(trial.config, self.defaults, self.spec.seeds, self.searcher)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        ident = self._ident(trial)
        self.writer.seed_run(ident)
        self._log(f"[trial] {ident.name} seed {ident.seed}: running   {self._summary(trials)}")

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        ident = self._ident(trial)
        if result.get("replayed"):
            return
        if result.get("final"):
            test = {k[5:]: float(v) for k, v in result.items() if k.startswith("test_")}
            extra = {"best_step": float(result["best_step"]), "objective": float(result["objective"]),
                     **{k: float(result[k]) for k in ("cascade_map", "cascade_cost") if k in result}, "trial_started": float(result["started"]),
                     "trial_ended": float(result["ended"]), **json.loads(result.get("resolved_json", "{}"))}
            self.writer.finish_seed(ident, test, json.loads(result["per_query_json"]), extra,
                                    evaluation=result.get("eval_fingerprint"))
            agg = self.writer.aggregate(ident.config_id, list(self.spec.seeds))
            self._log(f"[trial] {ident.name} seed {ident.seed}: done, test map {test.get('map', math.nan):.4f}"
                      f"   {self._summary(trials, finished=(trial, test.get('map')))}")
            if agg:
                self._log(f"[config] {ident.name}: map {agg['map_mean']:.4f} +- {agg['map_sd']:.4f} "
                          f"over seeds {list(self.spec.seeds)}")
        else:
            dev = {k[4:]: float(v) for k, v in result.items() if k.startswith("dev_")}
            self.writer.dev_point(ident, int(result["step"]), dev)

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        ident = self._ident(trial)
        self._log(f"[trial] {ident.name} seed {ident.seed}: failed, retrying from its last checkpoint")

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        ident = self._ident(trial)
        self.writer.fail_seed(ident, str(getattr(trial, "error_file", "") or "trial failed"))
        self._log(f"[trial] {ident.name} seed {ident.seed}: FAILED after retries   {self._summary(trials)}")

    def _summary(self, trials: list[Any], finished: tuple[Any, float | None] | None = None) -> str:
        """Counts by state and the best test MAP so far; ``finished`` is a trial whose final result
        is being handled (Tune still lists it as running, without that result)."""
        done_trial, done_map = finished or (None, None)
        states: dict[str, int] = {}
        best = []
        for t in trials:
            now = t is done_trial
            status = "TERMINATED" if now else t.status
            states[status] = states.get(status, 0) + 1
            value = done_map if now else t.last_result.get("test_map")
            if value is not None:
                best.append(value)
        best_s = f", best test map {max(best):.4f}" if best else ""
        return (f"(done {states.get('TERMINATED', 0)}, running {states.get('RUNNING', 0)}, "
                f"pending {states.get('PENDING', 0)}, failed {states.get('ERROR', 0)} of {self.total}{best_s})")


class SeedRepeater(Repeater):
    """Repeater that also averages a list of metrics (multi-objective NSGA-II)."""

    early_stop: str | None = None  # early stopping's state: a stopped config reports its rung mean

    def on_trial_complete(self, trial_id: str, result: dict | None = None, **kwargs: Any) -> None:
        metric = self.searcher.metric
        result = early_stop_ray.searcher_value(self.early_stop, metric, result)  # early stopping hook
        if not isinstance(metric, list):
            return super().on_trial_complete(trial_id, result, **kwargs)
        group = self._trial_id_to_group[trial_id]
        group.report(trial_id, [result.get(m, np.nan) for m in metric] if result else [np.nan] * len(metric))
        if group.finished_reporting():
            scores = np.array(group.scores(), dtype=float)
            means = np.nanmean(scores, axis=0)
            self.searcher.on_trial_complete(group.primary_trial_id,
                                            result=dict(zip(metric, means.tolist(), strict=True)), **kwargs)


# -- the driver ----------------------------------------------------------------------------------

def init_ray(spec: StudySpec, num_gpus: float | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    kw: dict[str, Any] = {"log_to_driver": False, "configure_logging": True, "logging_level": "ERROR"}
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**kw)
    else:
        ray.init(address="local", include_dashboard=False, num_gpus=num_gpus, **kw)


class DefineByRun:
    """Optuna define-by-run space: suggestions only (STYLE 8). A module-level class so Tune can
    pickle the searcher into its experiment state (resume)."""

    def __init__(self, space: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.space = dict(space)
        self.defaults = dict(defaults)

    def __call__(self, trial: Any) -> dict[str, Any]:
        return suggest(trial, self.space, self.defaults)


def _searcher(spec: StudySpec) -> Any:
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    assert spec.search is not None
    s = spec.search
    seed = spec.seeds[0]
    sampler = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed),
               "random": lambda: optuna.samplers.RandomSampler(seed=seed),
               "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed)}[s.searcher]()
    define_by_run = DefineByRun(s.space, spec.defaults.to_flat())

    metrics = [objective_key(m, spec.metric, len(s.objectives)) for m, _ in s.objectives]
    modes = [md for _, md in s.objectives]
    if len(metrics) == 1:
        opt = OptunaSearch(space=define_by_run, metric=metrics[0], mode=modes[0], sampler=sampler)
    else:
        opt = OptunaSearch(space=define_by_run, metric=metrics, mode=modes, sampler=sampler)
    repeater = SeedRepeater(opt, repeat=len(spec.seeds), set_index=True)
    repeater.early_stop = early_stop_ray.state_uri(spec) if spec.early_stopping else None
    return repeater


def objective_key(metric: str, study_metric: str, n_objectives: int) -> str:
    """The final-result key a searcher reads for an objective: the trial's best dev value
    ("objective") for a single objective, best_dev_<m> per metric for several; cascade_map and
    cascade_cost (dev, at the configured alphas) as they are."""
    if metric.startswith("cascade_"):
        return metric
    return "objective" if n_objectives == 1 and metric == study_metric else f"best_dev_{metric}"


def run_study(spec: StudySpec, *, resume: bool = False, progress: Progress | None = None,
              tracking_uri: str | None = None, num_gpus: float | None = None,
              hooks: dict[str, str] | None = None, resume_command: str | None = None,
              fresh: bool = False) -> dict[str, Any]:
    """Run (or, with ``resume``, finish) a study; returns per-config aggregates and the MLflow ids.

    One driver per study: the study's lease (harness.study.lease) is taken before anything is
    recorded and released at the end, so a second driver is refused (``LeaseHeld``) and writes
    nothing. ``resume_command`` is what a refused driver is told to run once this one is gone.
    ``fresh`` discards Tune state of an earlier run (under the lease; `harness demo`): trials already
    recorded in MLflow are replayed from there. Ends with ``ReportUnavailable`` (after every trial is
    recorded and the runs are ended) when the significance report could not be produced.
    """
    log = progress or _stderr
    base = Path(spec.storage_path) if "://" not in spec.storage_path else None
    if base is None:
        log(f"lease: Tune storage {spec.storage_path} is not a local path; this study is not guarded "
            "against a second driver (run one `harness run` per study)")
        return _drive(spec, resume, log, tracking_uri, num_gpus, hooks, fresh, base)
    lease = StudyLease(base / f"{spec.name}.lease", study=spec.name, log=log,
                       resume=resume_command or f"harness run {spec.path or 'STUDY'} --resume")
    with lease:
        return _drive(spec, resume, log, tracking_uri, num_gpus, hooks, fresh, base)


def _drive(spec: StudySpec, resume: bool, log: Progress, tracking_uri: str | None,
           num_gpus: float | None, hooks: dict[str, str] | None, fresh: bool,
           base: Path | None) -> dict[str, Any]:
    from harness.tracking.store import TrackingStore, default_tracking_uri

    hooks = dict(hooks or {})
    # Testing hooks, also reachable from a `harness run` subprocess: a file that records each trial
    # start/end, and a directory that makes each trial fail once after its first evaluation.
    for key, env in (("trial_log", "HARNESS_TRIAL_LOG"), ("fail_once_dir", "HARNESS_FAIL_ONCE_DIR")):
        if os.environ.get(env):
            hooks.setdefault(key, os.environ[env])
    phases = ["fixed"] + (["search"] if spec.search else [])
    if fresh and base is not None:
        for p in phases:
            shutil.rmtree(base / f"{spec.name}-{p}", ignore_errors=True)
    existing = [p for p in phases if base is not None and (base / f"{spec.name}-{p}").exists()]
    if existing and not resume:
        assert base is not None
        raise HarnessError(f"study {spec.name!r} already has Ray Tune state at {base / (spec.name + '-' + existing[0])}; "
                           "use `harness run STUDY --resume` to finish it, or change storage_path")
    uri = tracking_uri or spec.tracking_uri or default_tracking_uri()
    store = TrackingStore(uri)
    exp_id = store.experiment(spec.name)
    writer = StudyWriter(store, exp_id, spec.name)
    study_run = writer.study_run(study_text=spec.text, params=study_params(spec, trial_count(spec)))
    unavailable: ReportUnavailable | None = None
    # System metrics (CPU, memory, GPU where available) sample onto the study run until it ends.
    with SystemMetrics(study_run, uri, progress=log):
        log(f"study {spec.name}: {trial_count(spec)} trials ({len(spec.fixed_configs())} fixed configs"
            f"{f' + {spec.search.num_configs} from {spec.search.searcher}' if spec.search else ''} x seeds "
            f"{list(spec.seeds)}); MLflow experiment {spec.name!r} at {uri}")
        prepared = prepare_study(spec, progress=log)
        init_ray(spec, num_gpus=num_gpus)
        callback = TrackingCallback(spec, uri, exp_id, progress=log)
        fn = tune.with_parameters(trainable, prepared=prepared, defaults=spec.defaults.to_flat(),
                                  seeds=spec.seeds, searcher=spec.search.searcher if spec.search else "grid",
                                  metric=spec.metric, hooks=hooks, finished=writer.done_objectives())
        fn = tune.with_resources(fn, {"cpu": spec.cpus, "gpu": spec.gpus})
        for phase in phases:
            _run_phase(spec, phase, fn, callback, resume)
        callback.progress = log
        # early stopping and storage hook: tag stopped configurations, log steps saved and disk usage
        early_stop_ray.finish(spec, store, exp_id, study_run, callback.writer.config_runs(), log)
        from harness.study.storage import report_storage
        report_storage(spec, store, study_run, log)
        references = _reference_maps(spec, prepared, store, study_run, log)
        try:
            results = report_study(spec, callback.writer, store, study_run, log)
        except ReportUnavailable as exc:
            unavailable, results = exc, {}
    for name, value in references.items():
        log(f"reference on the same test queries: {name} MAP {value:.4f}")
    if unavailable is not None:
        raise unavailable
    return {"experiment_id": exp_id, "study_run": study_run, "configs": results, "tracking_uri": uri,
            "references": references}


def _reference_maps(spec: StudySpec, prepared: dict[str, Any], store: Any, study_run: str,
                    log: Progress) -> dict[str, float]:
    """The first-stage (BM25) ranking and a random order on the baseline's test queries."""
    from harness.training.baselines import reference_maps

    out = reference_maps(prepared[variant_key(spec.baseline.config)].splits.test)
    if "bm25" not in out:
        log("reference: no BM25 MAP (candidates carry no BM25 score)")
    store.log_metrics(study_run, {f"reference_{k}_map": v for k, v in out.items()})
    return out


def _run_phase(spec: StudySpec, phase: str, fn: Any, callback: TrackingCallback, resume: bool) -> None:
    name = f"{spec.name}-{phase}"
    path = f"{spec.storage_path.rstrip('/')}/{name}"
    if phase == "fixed":
        trials = [{"name": nc.name, "role": nc.role, "seed": s, "flat": nc.config.with_seed(s).to_flat()}
                  for nc in spec.fixed_configs() for s in spec.seeds]
        param_space: dict[str, Any] = {"trial": tune.grid_search(trials)}
        tune_config = tune.TuneConfig(max_concurrent_trials=spec.concurrency, reuse_actors=True,
                                      scheduler=early_stop_ray.scheduler(spec, identify))
    else:
        assert spec.search is not None
        param_space = {}
        tune_config = tune.TuneConfig(search_alg=_searcher(spec), num_samples=spec.search.num_configs * len(spec.seeds),
                                      max_concurrent_trials=spec.concurrency, reuse_actors=True,
                                      scheduler=early_stop_ray.scheduler(spec, identify))
    if resume and tune.Tuner.can_restore(path):
        tuner = tune.Tuner.restore(path, trainable=fn, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space)
    else:
        run_config = tune.RunConfig(
            name=name, storage_path=spec.storage_path, callbacks=[callback], verbose=0,
            failure_config=tune.FailureConfig(max_failures=spec.max_retries),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1))
        tuner = tune.Tuner(fn, param_space=param_space, tune_config=tune_config, run_config=run_config)
    grid = tuner.fit()
    errors = [r.error for r in grid if r.error is not None]
    if errors:
        callback._log(f"{len(errors)} trial(s) of phase {phase} failed after retries; first error: "
                      f"{str(errors[0]).splitlines()[0][:300]}")


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
