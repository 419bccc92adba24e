"""Early stopping in Ray Tune: a scheduler that feeds trial results to ``harness.study.early_stop``
and stops every trial of a stopped configuration, and the study-end bookkeeping in MLflow.

Wiring (harness.driver.runner): ``scheduler(spec, ...)`` goes into ``tune.TuneConfig(scheduler=...)``
of every phase; ``searcher_value`` replaces a stopped trial's result before the seed repeater
averages it for Optuna; ``finish(...)`` runs once all phases are done, before the report.

The state (rung values, stopped configurations, steps run) is JSON at ``state_uri(spec)``, in the
fixed phase's Tune experiment directory on the study's storage path (a local path or s3://): the
scheduler pickled into Tune's experiment state reads it back on ``--resume``, so a stopped
configuration stays stopped, and `harness demo`'s fresh start removes it with the Tune state. The
storage may be shared, so every read checks the whole file (harness.study.early_stop's reader), and
``scheduler(spec)``, made before a phase starts or is restored, reads it first: a damaged or planted
state ends the run as a refusal (one line naming the file and the field, exit 2), as a planted Tune
state does (harness.driver._state_trust), never as a traceback from inside Tune.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from harness.driver._storage import EARLY_STOP_STATE, read_text, write_text
from harness.study.early_stop import EarlyStopSettings, EarlyStopState, not_utf8, rungs_at
from harness.study.protocol import MEMBERS
from harness.tracking import conventions as C


def state_uri(spec: Any) -> str:
    return f"{spec.phase_dir('fixed')}/{EARLY_STOP_STATE}"


def load_state(uri: str, settings: EarlyStopSettings, min_groups: int) -> EarlyStopState:
    """The state at ``uri`` (a new one where there is none); a file that is not a state this harness
    wrote is refused in one line naming it and the field (``harness.study.early_stop.StateError``)."""
    st = _saved(uri, settings)
    if st is None:
        return EarlyStopState(settings, min_groups)
    st.min_groups = min_groups
    return st


def _saved(uri: str, settings: EarlyStopSettings | None = None) -> EarlyStopState | None:
    """The state saved at ``uri``, checked (None where there is none)."""
    source = f"early stopping state {uri}"
    try:
        text = read_text(uri)
    except UnicodeDecodeError:
        raise not_utf8(source) from None
    return None if text is None else EarlyStopState.from_json(text, settings, source=source)


class EarlyStopScheduler(FIFOScheduler):
    """FIFO order; STOP for every trial of a configuration the decision module stopped."""

    def __init__(self, settings: EarlyStopSettings, uri: str, identify: Callable[[Mapping[str, Any]], Any],
                 min_groups: int) -> None:
        super().__init__()
        self.settings = settings
        self.uri = uri
        self.identify = identify
        self.min_groups = min_groups
        self._state: EarlyStopState | None = None

    def __getstate__(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["_state"] = None  # read back from the JSON on restore
        return out

    @property
    def state(self) -> EarlyStopState:
        if self._state is None:
            self._state = load_state(self.uri, self.settings, self.min_groups)
        return self._state

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        if result.get("replayed"):
            return TrialScheduler.CONTINUE
        ident = self.identify(trial.config)
        st = self.state
        step = result.get("step")
        if step is None:
            return TrialScheduler.STOP if st.is_stopped(ident.config_id) else TrialScheduler.CONTINUE
        steps, every = int(ident.flat["train.steps"]), int(ident.flat["train.eval_every"])
        baseline = ident.role == C.ROLE_BASELINE
        # A study over several collections: a rung ranks the configurations of this trial's own.
        collection = str(ident.flat.get(C.COLLECTION_PARAM) or "")
        # A seed group's result carries each seed's point (its seeds share the configuration, steps
        # and evaluation steps): the configuration is judged once on all of them, as on the same
        # seeds' separate trials once each has reported.
        points = {ident.member(r["trial_key"]).seed: r for r in result[MEMBERS]} if MEMBERS in result \
            else {ident.seed: result}
        values = {seed: dev_value(r, self.settings.metric) for seed, r in points.items()}
        decision = None
        # The rungs this evaluation reads, by their fraction of this configuration's own steps
        # (configurations of other lengths read them at other steps and are compared there).
        rungs = rungs_at(self.settings, steps, every, int(step))
        if st.is_stopped(ident.config_id):  # another seed of a stopped configuration: its steps count
            for seed in points:
                st.progress(ident.config_id, ident.name, seed, int(step), total_steps=steps, baseline=baseline,
                            collection=collection)
            write_text(self.uri, st.to_json())
            return TrialScheduler.STOP
        if not result.get("final") and all(v is not None for v in values.values()) and rungs:
            for rung in rungs:
                decision = st.observe_seeds(ident.config_id, ident.name, {s: float(v) for s, v in values.items()},
                                            step=int(step), total_steps=steps, baseline=baseline,
                                            collection=collection, rung=rung)
                if decision is not None:
                    break
        else:
            for seed in points:
                st.progress(ident.config_id, ident.name, seed, int(step), total_steps=steps, baseline=baseline,
                            collection=collection)
        write_text(self.uri, st.to_json())
        if decision is None:
            return TrialScheduler.CONTINUE
        where = f" on {collection}" if collection else ""
        print(f"[early-stop] {ident.name}{where}: stopped at step {decision.rung}: {decision.reason}",
              file=sys.stderr, flush=True)
        self._stop_pending(tune_controller, ident.config_id)
        return TrialScheduler.STOP

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        # A stopped configuration's seeds still pending (added by a searcher's repeater, or left
        # pending by a driver that died) end before they start.
        for cid in list(self.state.stopped):
            self._stop_pending(tune_controller, cid)
        return super().choose_trial_to_run(tune_controller)

    def _stop_pending(self, tune_controller: Any, config_id: str) -> None:
        for t in list(tune_controller.get_trials()):
            if t.status in (Trial.PENDING, Trial.PAUSED) and self.identify(t.config).config_id == config_id:
                t.init_local_path()  # a trial that never ran has no directory; Tune's results need one
                tune_controller.stop_trial(t)

    def debug_string(self) -> str:
        return f"Early stopping over configurations: {len(self.state.stopped)} stopped."


def dev_value(result: Mapping[str, Any], metric: str) -> float | None:
    """A DevPoint result's dev ``metric`` (harness.study.protocol), as Tune hands it to a
    scheduler (flattened: ``dev/<m>``) or as reported (nested)."""
    value = result.get(f"dev/{metric}")
    if value is None and isinstance(result.get("dev"), Mapping):
        value = result["dev"].get(metric)
    return None if value is None else float(value)


def scheduler(spec: Any) -> EarlyStopScheduler | None:
    """The study's scheduler (None when early stopping is off); a trial's configuration and seed
    are its ticket (harness.study.protocol.TrialTicket)."""
    from harness.study.protocol import TrialTicket

    if spec.early_stopping is None:
        return None
    # Read (and checked) before the phase starts: a damaged or planted state is refused in one line,
    # as Tune's own state is (harness.driver._state_trust), before Tune restores anything.
    load_state(state_uri(spec), spec.early_stopping, min_groups(spec))
    return EarlyStopScheduler(spec.early_stopping, state_uri(spec), TrialTicket.from_tune, min_groups(spec))


def min_groups(spec: Any) -> int:
    """How many configurations a rung waits for before it judges one: the fixed configurations
    (of one collection, in a study over several: a rung ranks one collection's)."""
    if spec.collections:
        return len(spec.collection_configs(spec.collections[0]))
    return len(spec.fixed_configs())


def searcher_value(uri: str | None, metric: str, result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The result a seed repeater averages for Optuna: for a trial of a stopped configuration, its
    group mean at the rung where it was stopped (the same for all its seeds), under ``metric``."""
    if not uri or not result or "trial_key" not in result:
        return result
    st = _saved(uri)
    if st is None:
        return result
    cid = str(result["trial_key"]).rsplit("-seed", 1)[0]
    stopped = st.stopped.get(cid)
    return result if stopped is None else {**result, metric: stopped.value}


def finish(spec: Any, store: Any, experiment_id: str, study_run: str, config_runs: Mapping[str, str],
           log: Callable[[str], None]) -> dict[str, Any]:
    """Tag stopped configurations (config run and seed runs; unfinished seed runs end KILLED) and log
    the trial-steps saved on the study run. Idempotent (a resumed study calls it again)."""
    if spec.early_stopping is None:
        return {}
    st = load_state(state_uri(spec), spec.early_stopping, min_groups(spec))
    for cid, s in st.stopped.items():
        tags = {C.TAG_STOPPED: "1", C.TAG_STOPPED_RUNG: str(s.rung), C.TAG_STOPPED_REASON: s.reason[:5000]}
        if cid in config_runs:  # its description (the verdict of a tested one) says why it has none
            store.set_tags(config_runs[cid], {**tags, C.TAG_NOTE: f"stopped early at step {s.rung}: {s.reason}"[:5000]})
        runs = store.client.search_runs(
            [experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}' and "
                                           f"tags.`{C.TAG_CONFIG_ID}` = '{cid}'", max_results=1000)
        for run in runs:
            store.set_tags(run.info.run_id, tags)
            if run.info.status == "RUNNING":
                store.end_run(run.info.run_id, "KILLED")
    seeds = len(spec.seeds)
    saved, ran = st.steps_saved(seeds), st.steps_run()
    store.log_metrics(study_run, {C.METRIC_STEPS_SAVED: float(saved), C.METRIC_STEPS_RUN: float(ran),
                                  C.METRIC_STOPPED: float(len(st.stopped))})
    names = ", ".join(f"{s.name}{_on(st, cid)} (step {s.rung})" for cid, s in st.stopped.items()) or "none"
    total = ran + saved
    pct = f" ({100 * saved / total:.0f}%)" if total else ""
    configs = sum(not cid.endswith("-confirm") for cid in config_runs)  # the confirmation's retrain
    log(f"early stopping: {len(st.stopped)} of {configs} configuration(s) stopped "
        f"({len(st.stopped) * seeds} of {configs * seeds} trials): {names}; {saved} trial-steps saved "
        f"of {total}{pct}, {ran} run")
    return {"stopped": {cid: s.name for cid, s in st.stopped.items()}, "steps_saved": saved, "steps_run": ran}


def _on(st: EarlyStopState, config_id: str) -> str:
    """" on <collection>" for a configuration of a study over several collections, else ""."""
    g = st.groups.get(config_id)
    return f" on {g.collection}" if g is not None and g.collection else ""
