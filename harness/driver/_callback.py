"""The driver side of a study's trials: the one MLflow writer (through harness.tracking.records) and
the progress lines. Dev points are recorded from Tune's results; a trial's outcome from the
checkpoint of its final report (its outcome, per-query values and files; harness.study.protocol).

The progress lines show dev values only (the objective at each trial's best-dev checkpoint): a
running study never shows the test set, so nothing is picked by looking at it."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ray import tune

from harness.driver._confirm import phase_of
from harness.driver._final_report import summarise_config
from harness.study.protocol import (
    MEMBERS,
    DevPoint,
    PerQuery,
    TrialOutcome,
    TrialTicket,
    artifact_files,
    is_outcome,
    member_dir,
    member_points,
    read_outcome,
)
from harness.study.rounds import round_of, seeds_through
from harness.study.spec import StudySpec
from harness.study.variants import trial_count
from harness.tracking.conventions import TAG_LABEL, TAG_PHASE, TAG_ROUND
from harness.tracking.records import StudyRecords

Progress = Callable[[str], None]


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)



def label_tags(spec: StudySpec, name: str) -> dict[str, str]:
    """The config run's tag harness.label where the study file gives configuration ``name`` a
    label (the readers name it so in every table); none otherwise."""
    label = next((nc.label for nc in spec.fixed_configs() if nc.name == name), "")
    return {TAG_LABEL: label} if label else {}

class TrackingCallback(tune.Callback):
    """Writes every trial to MLflow from the driver and prints progress; picklable (the records are
    rebuilt after a restore from the tags already in MLflow)."""

    def __init__(self, spec: StudySpec, uri: str, experiment_id: str, progress: Progress | None = None,
                 resume: str | None = None) -> None:
        self.spec = spec
        self.uri = uri
        self.experiment_id = experiment_id
        self._records: StudyRecords | None = None
        self.progress = progress
        self.total = trial_count(spec)
        self.resume = resume or f"harness run {spec.path or 'STUDY'} --resume"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_records"] = None
        state["progress"] = None
        return state

    @property
    def records(self) -> StudyRecords:
        if self._records is None:
            from harness.tracking.store import TrackingStore

            self._records = StudyRecords(TrackingStore(self.uri), self.experiment_id, self.spec.name)
        return self._records

    def reload(self) -> None:
        """Read the records back from MLflow at the next use: a Tune experiment restored on resume
        runs its own unpickled copy of this callback, whose writes this one has not seen."""
        self._records = None

    def log(self, msg: str) -> None:
        (self.progress or stderr)(msg)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        group = TrialTicket.from_tune(trial.config)
        for ticket in group.members():  # a seed group's trial: one seed run per seed
            k = round_of(self.spec, ticket.seed)
            phase = {TAG_PHASE: phase_of(self.spec, ticket)}
            self.records.trial_started(ticket, tags={**phase, **({TAG_ROUND: str(k)} if k is not None else {})},
                                       config_tags={**phase, **label_tags(self.spec, ticket.name)})
        self.log(f"[trial] {_label(group)} {_seeds(group)}: running   {self._summary(trials)}")

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        if is_outcome(result):
            return  # recorded from its checkpoint (on_checkpoint); a replayed one is recorded already
        ticket = TrialTicket.from_tune(trial.config)
        if MEMBERS in result:
            for point in member_points(result):
                self.records.dev_point(ticket.member(point.key), point.step, point.metrics)
            return
        point = DevPoint.from_result(result)
        self.records.dev_point(ticket, point.step, point.metrics)

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        if not is_outcome(trial.last_result):
            return  # an evaluation's checkpoint (model state)
        ticket = TrialTicket.from_tune(trial.config)
        with checkpoint.as_directory() as d:
            if ticket.seeds:  # a seed group: each member's outcome and files in its folder
                for member in ticket.members():
                    found = read_outcome(member_dir(d, member.key))
                    if found is not None:
                        self.trial_finished(trials, trial, *found, files=artifact_files(member_dir(d, member.key)),
                                            ticket=member)
                return
            found = read_outcome(d)
            if found is None:
                return
            self.trial_finished(trials, trial, *found, files=artifact_files(d))

    def trial_finished(self, trials: list[Any], trial: Any, outcome: TrialOutcome, per_query: PerQuery,
                       files: Iterable[tuple[Path, str | None]], ticket: TrialTicket | None = None) -> None:
        """Record a trial's outcome; ``files`` (the outcome checkpoint's artifacts/) become
        artifacts of its seed run; ``ticket``: the member of a seed group it belongs to."""
        ticket = ticket or TrialTicket.from_tune(trial.config)
        self.records.trial_finished(ticket, outcome, per_query, files)
        seeds = seeds_through(self.spec, ticket.seed)  # a seed schedule: the rounds so far
        summary = summarise_config(self.records, ticket.config_id, seeds)
        metric = self.spec.metric
        self.log(f"[trial] {_label(ticket)} seed {ticket.seed}: done, dev {metric} {outcome.objective:.4f}"
                 f"   {self._summary(trials, finished=(trial, outcome.objective))}")
        if summary:
            from harness.results.stored import seed_summary

            # From the records (MLflow), not this process's memory: after a resume the seeds an
            # earlier driver finished count too.
            done = self.records.done_objectives()
            mean, sd = seed_summary([done[k] for s in seeds
                                     if (k := dataclasses.replace(ticket, seed=s, seeds=()).key) in done])
            self.log(f"[config] {_label(ticket)}: dev {metric} {mean:.4f}"
                     f"{f' +- {sd:.4f}' if math.isfinite(sd) else ''} over seeds {seeds}")

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        ticket = TrialTicket.from_tune(trial.config)
        cause = ray_cause(trial)
        self.log(f"[trial] {_label(ticket)} {_seeds(ticket)}: failed, retrying from its last checkpoint"
                 f"{f' ({cause})' if cause else ''}")

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        ticket = TrialTicket.from_tune(trial.config)
        cause = ray_cause(trial)
        error = trial_error(trial, cause)
        for member in ticket.members():
            self.records.trial_failed(member, error)
        if cause:  # Ray ended it: the one line says why and how to run it again (Tune's traceback is off)
            self.log(f"[trial] {_label(ticket)} {_seeds(ticket)}: FAILED, {cause}; `{self.resume}` runs it "
                     f"again   {self._summary(trials)}")
            return
        self.log(f"[trial] {_label(ticket)} {_seeds(ticket)}: FAILED after retries   {self._summary(trials)}")

    def _summary(self, trials: list[Any], finished: tuple[Any, float] | None = None) -> str:
        """Counts by state and the best dev objective of the finished trials so far; ``finished`` is
        a trial whose outcome is being recorded (Tune still lists it as running)."""
        done_trial, done_value = finished or (None, None)
        states: dict[str, int] = {}
        values: list[tuple[str, float]] = []
        for t in trials:
            now = t is done_trial
            status = "TERMINATED" if now else t.status
            ticket = TrialTicket.from_tune(t.config)
            # a seed group's trial counts its seeds, as the total does
            states[status] = states.get(status, 0) + len(ticket.members())
            value = done_value if now else (t.last_result.get("objective") if is_outcome(t.last_result) else None)
            if value is not None and math.isfinite(value):
                values.append((ticket.flat.get("data.collection", ""), value))
        return (f"(done {states.get('TERMINATED', 0)}, running {states.get('RUNNING', 0)}, "
                f"pending {states.get('PENDING', 0)}, failed {states.get('ERROR', 0)} of {self.total}"
                f"{best_dev(values, self.spec.metric, self.spec.mode)})")


def best_dev(values: list[tuple[str, float]], metric: str, mode: str) -> str:
    """", best dev map 0.4100" from (collection, dev objective) pairs of the finished trials; over
    several collections the best of each (", best dev map 0.4100 on chitchat, 0.3000 on
    cranfield"): collections' values are not one scale, so no best is taken across them."""
    pick = max if mode == "max" else min
    best: dict[str, float] = {}
    for collection, value in values:
        best[collection] = pick(best.get(collection, value), value)
    if not best:
        return ""
    if list(best) == [""]:
        return f", best dev {metric} {best['']:.4f}"
    return f", best dev {metric} " + ", ".join(f"{best[c]:.4f} on {c}" for c in sorted(best))


def _label(ticket: TrialTicket) -> str:
    """How a progress line names the trial's configuration: its name, and in a study over several
    collections the collection (each configuration runs on every one, under one name)."""
    collection = ticket.flat.get("data.collection")
    return f"{ticket.name} on {collection}" if collection else ticket.name


def _seeds(ticket: TrialTicket) -> str:
    """"seed 3", or a seed group's "seeds 1, 2"."""
    if ticket.seeds:
        return f"seeds {', '.join(map(str, ticket.seeds))}"
    return f"seed {ticket.seed}"


def trial_error(trial: Any, cause: str | None = None) -> str:
    """What a failed trial's seed run records as its error: the last line of the traceback Tune
    wrote (the exception and its message), or ``cause`` where Ray ended the trial (``ray_cause``),
    and where the whole traceback is."""
    path = str(getattr(trial, "error_file", "") or "")
    if cause:
        return f"{cause} (traceback: {path})" if path else cause
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()] if path else []
    except OSError:
        lines = []
    if not lines:
        return f"trial failed (traceback: {path})" if path else "trial failed"
    return f"{lines[-1][:1000]} (traceback: {path})"


# Why Ray ended a trial's process, from the words of its error where its type does not say more;
# the most specific first. An ActorDiedError carries the raylet's exit type and detail in its text.
OUT_OF_MEMORY = ("NODE_OUT_OF_MEMORY", "running low on memory", "memory pressure")
NODE_LOST = ("node has died", "node is dead", "NODE_DIED", "raylet died")
CAUSE_OOM = "killed by Ray's memory monitor: its node ran out of memory"
CAUSE_NODE = "its node was lost (the machine stopped or left the cluster)"
CAUSE_DIED = ("its worker process died (killed, as the system's out-of-memory killer kills, or "
              "crashed)")


def ray_cause(trial: Any) -> str | None:
    """Why Ray ended a failed trial's worker (out of memory, node lost, the process died), in a
    few words; None where the trial's own code raised (its traceback's last line says why)."""
    try:
        exc = trial.get_pickled_error()
    except Exception:  # noqa: BLE001 - an error that does not unpickle here: read its text below
        exc = None
    return cause_of(exc, str(exc) if exc is not None else _error_text(trial))


def cause_of(exc: BaseException | None, text: str = "") -> str | None:
    """``ray_cause`` of an error (``text``: its words where the error itself is not at hand)."""
    from ray import exceptions as rx

    text = text or (str(exc) if exc is not None else "")
    if isinstance(exc, rx.OutOfMemoryError):
        return CAUSE_OOM
    if isinstance(exc, (rx.NodeDiedError, rx.LocalRayletDiedError)):
        return CAUSE_NODE
    died = isinstance(exc, (rx.RayActorError, rx.WorkerCrashedError)) or (
        exc is None and any(m in text for m in (rx.ActorDiedError.BASE_ERROR_MSG, "worker process has died")))
    if not died:
        return None
    if any(m in text for m in OUT_OF_MEMORY):
        return CAUSE_OOM
    if any(m in text for m in NODE_LOST) or getattr(exc, "preempted", False):
        return CAUSE_NODE
    return CAUSE_DIED


def _error_text(trial: Any) -> str:
    path = str(getattr(trial, "error_file", "") or "")
    try:
        return Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return ""
