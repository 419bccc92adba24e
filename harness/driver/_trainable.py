"""The worker side of a study: the Tune trainable (runs in Ray workers).

One trial = one ticket (harness.study.protocol): it trains its configuration, reports a ``DevPoint``
at every evaluation, with a checkpoint at its first evaluation and then at the first evaluation at
least ``checkpoint_every_s`` seconds after the last checkpoint (study key
``failure.checkpoint_every_s``; 0: at every evaluation), and ends with one ``TrialOutcome`` whose checkpoint directory
holds the outcome, the per-query values and the seed run's further files (``write_trial_files``).
A trial recorded as finished in MLflow, or restored from its outcome checkpoint, replays its outcome
instead of training again.

A seed group's trial (``resources.seeds_per_trial``; harness.study.protocol) trains its seeds as one
``SeedGroup`` (harness.training.fused) and reports their evaluations together; its checkpoints hold
each member's ``trainer.pt`` in the member's folder, so a retried group resumes every seed from the
same step; its final checkpoint holds each member's outcome and files there.

Test hooks are injected (``TrialHooks``, passed to ``run_study``), never read from the environment.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

from harness.heap import paused
from harness.study.protocol import (
    DevPoint,
    TrialOutcome,
    TrialTicket,
    group_outcome,
    group_point,
    member_dir,
    read_group_outcome,
    read_outcome,
    write_group_outcome,
    write_outcome,
)
from harness.study.trial import run_group, run_trial, write_trial_files
from harness.study.variants import variant_key


@dataclass(frozen=True)
class TrialHooks:
    """Testing hooks of the trainable; the default does nothing.

    ``trial_log``: a file that gets a line per trial event ("<key> start <step>", "<key> end
    <step>", "<key> replay"). ``fail_once_dir``: a directory; every trial fails once, after its
    first checkpointed evaluation (a marker file per trial key remembers it). ``hold``: (file, trial
    key): that trial waits after its first checkpointed evaluation until the file exists. ``meet``:
    (directory, count): after its first checkpointed evaluation every trial leaves a file there and
    waits until ``count`` trials have (at most ``MEET_TIMEOUT_S``), so trials that can run at once
    are seen running at once whatever their start-up times. ``fail_always``: trial keys that raise as
    every attempt starts; ``die_always``: trial keys whose worker process is SIGKILLed as every
    attempt starts (as Ray's memory monitor or the kernel's OOM killer ends it)."""

    trial_log: str | None = None
    fail_once_dir: str | None = None
    hold: tuple[str, str] | None = None
    meet: tuple[str, int] | None = None
    fail_always: tuple[str, ...] = ()  # trial keys that fail as every attempt starts
    # trial keys whose worker process is killed (SIGKILL, as an out-of-memory kill) as every attempt starts
    die_always: tuple[str, ...] = ()

    def at_start(self, key: str, step: int) -> None:
        self.note(key, f"start {step}")
        if key in self.die_always:
            os.kill(os.getpid(), signal.SIGKILL)
        if key in self.fail_always:
            raise RuntimeError(f"injected failure in {key} at step {step}, every attempt (testing hook)")

    def note(self, key: str, event: str) -> None:
        if self.trial_log:
            with open(self.trial_log, "a") as fh:
                fh.write(f"{key} {event}\n")

    def after_evaluation(self, key: str, step: int) -> None:
        if self.hold and key == self.hold[1]:
            while not Path(self.hold[0]).exists():
                time.sleep(0.2)
        if self.meet and not Path(self.meet[0], key).exists():
            Path(self.meet[0], key).touch()
            deadline = time.monotonic() + MEET_TIMEOUT_S
            while len(list(Path(self.meet[0]).iterdir())) < self.meet[1] and time.monotonic() < deadline:
                time.sleep(0.1)
        if not self.fail_once_dir:
            return
        marker = Path(self.fail_once_dir, key)
        if not marker.exists():
            marker.touch()
            raise RuntimeError(f"injected failure in {key} at step {step} (testing hook)")


NO_HOOKS = TrialHooks()
MEET_TIMEOUT_S = 60.0


def trainable(config: dict[str, Any], *, prepared: dict[str, Any], metric: str,
              finished: dict[str, float], hooks: TrialHooks = NO_HOOKS, checkpoint_every_s: float = 0.0,
              fuse: bool | None = None) -> None:
    ticket = TrialTicket.from_tune(config)
    if ticket.seeds:
        _group_trainable(ticket, prepared=prepared, metric=metric, finished=finished, hooks=hooks,
                         checkpoint_every_s=checkpoint_every_s, fuse=fuse)
        return
    if ticket.key in finished:
        # Recorded as finished in MLflow by an earlier driver (the source of truth on resume), even if
        # Tune's own snapshot had not caught up when that driver died: replay, never retrain.
        hooks.note(ticket.key, "replay")
        tune.report(TrialOutcome.replay(ticket.key, finished[ticket.key]).to_result())
        return
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            done = read_outcome(d)
            if done is not None:
                # The trial had reported its outcome but the driver may not have recorded it:
                # report it again, with its files.
                hooks.note(ticket.key, "replay")
                _report_outcome(done[0], d)
                return
    cfg = ticket.config()
    data = prepared[variant_key(cfg)]
    # Imports torch and transformers (the first trial of an actor) and builds the model with the
    # collector paused: each would otherwise trigger full collections (harness.heap). A replayed trial above needs neither.
    with paused():
        import torch

        from harness.training.loop import Trainer

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
        trainer = Trainer(cfg, data)
    if ckpt is not None:
        with ckpt.as_directory() as d:
            trainer.restore(d)
    hooks.at_start(ticket.key, trainer.step)
    run_trial(ticket, trainer, _TuneSink(ticket, trainer, hooks, checkpoint_every_s, resumed=ckpt is not None),
              metric=metric)


def _group_trainable(ticket: TrialTicket, *, prepared: dict[str, Any], metric: str, finished: dict[str, float],
                     hooks: TrialHooks, checkpoint_every_s: float, fuse: bool | None = None) -> None:
    """``trainable`` for a seed group: replayed when every member is recorded as finished (a member
    recorded already is skipped by the driver when the group reports it again)."""
    members = ticket.members()
    if all(m.key in finished for m in members):
        hooks.note(ticket.key, "replay")
        tune.report(group_outcome(ticket.key, [TrialOutcome.replay(m.key, finished[m.key]) for m in members]))
        return
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            if read_group_outcome(d) is not None:
                hooks.note(ticket.key, "replay")
                _report_group_outcome(d)
                return
    cfgs = [m.config() for m in members]
    data = prepared[variant_key(cfgs[0])]
    with paused():
        import torch

        from harness.training.fused import SeedGroup

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
        group = SeedGroup(cfgs, data, fused=fuse)  # fuse None: where it pays (harness.training.fused)
    if ckpt is not None:
        with ckpt.as_directory() as d:
            for m, trainer in zip(members, group.members, strict=True):
                trainer.restore(member_dir(d, m.key))
    hooks.at_start(ticket.key, group.members[0].step)
    run_group(ticket, group, _GroupTuneSink(ticket, group, hooks, checkpoint_every_s, resumed=ckpt is not None),
              metric=metric)


class _TuneSink:
    """A trial's records to Tune: a ``DevPoint`` per evaluation, with a checkpoint at the first one
    and then at the first one at least ``checkpoint_every_s`` after the last (a resumed trial's
    checkpoint counts as just written), and the outcome with its files as the final checkpoint.

    A checkpoint (``Trainer.save``, then Tune's copy into storage) costs a noticeable share of a
    short trial (benchmarks/results/checkpoint.md), hence the interval."""

    def __init__(self, ticket: TrialTicket, trainer: Any, hooks: TrialHooks, checkpoint_every_s: float,
                 resumed: bool) -> None:
        self.ticket, self.trainer, self.hooks = ticket, trainer, hooks
        self.every = checkpoint_every_s
        self.last_ckpt = time.monotonic() if resumed else None

    def step(self, rec: Any) -> None:
        pass

    def evaluation(self, rec: Any, point: DevPoint) -> None:
        if self.last_ckpt is not None and time.monotonic() - self.last_ckpt < self.every:
            tune.report(point.to_result())
            return
        with tempfile.TemporaryDirectory() as d:
            self.trainer.save(d)
            tune.report(point.to_result(), checkpoint=tune.Checkpoint.from_directory(d))
        self.last_ckpt = time.monotonic()
        self.hooks.after_evaluation(self.ticket.key, rec.step)

    def finished(self, outcome: TrialOutcome, final: Any) -> None:
        with tempfile.TemporaryDirectory() as d:
            artifacts = write_outcome(d, outcome, final.per_query)
            write_trial_files(artifacts, self.ticket, self.trainer.data.splits, final)
            self.trainer.save_best(d)  # the best-dev weights, for `harness export` and MLflow models
            tune.report(outcome.to_result(), checkpoint=tune.Checkpoint.from_directory(d))
        self.hooks.note(self.ticket.key, f"end {self.trainer.step}")


class _GroupTuneSink:
    """A seed group's records to Tune, as ``_TuneSink`` reports one trial's: one result per
    evaluation step (``group_point``), checkpointed on the same clock (every member's ``trainer.pt``
    in its folder), and one outcome (``group_outcome``) whose checkpoint holds each member's
    outcome, per-query values, run files and best-dev weights in its folder."""

    def __init__(self, ticket: TrialTicket, group: Any, hooks: TrialHooks, checkpoint_every_s: float,
                 resumed: bool) -> None:
        self.ticket, self.group, self.hooks = ticket, group, hooks
        self.members = ticket.members()
        self.every = checkpoint_every_s
        self.last_ckpt = time.monotonic() if resumed else None

    def step(self, member: TrialTicket, rec: Any) -> None:
        pass

    def evaluation(self, step: int, points: list[DevPoint]) -> None:
        result = group_point(self.ticket.key, step, points)
        if self.last_ckpt is not None and time.monotonic() - self.last_ckpt < self.every:
            tune.report(result)
            return
        with tempfile.TemporaryDirectory() as d:
            for m, trainer in zip(self.members, self.group.members, strict=True):
                trainer.save(member_dir(d, m.key))
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))
        self.last_ckpt = time.monotonic()
        self.hooks.after_evaluation(self.ticket.key, step)

    def finished(self, ends: list[tuple[TrialTicket, TrialOutcome, Any]]) -> None:
        with tempfile.TemporaryDirectory() as d:
            for (m, outcome, final), trainer in zip(ends, self.group.members, strict=True):
                folder = member_dir(d, m.key)
                folder.mkdir(parents=True)
                artifacts = write_outcome(folder, outcome, final.per_query)
                write_trial_files(artifacts, m, trainer.data.splits, final)
                trainer.save_best(folder)
            result = group_outcome(self.ticket.key, [outcome for _, outcome, _ in ends])
            write_group_outcome(d, result)
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))
        self.hooks.note(self.ticket.key, f"end {self.group.members[0].step}")


def _report_group_outcome(directory: str) -> None:
    result = read_group_outcome(directory)
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(directory, d, dirs_exist_ok=True)
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))


def _report_outcome(outcome: TrialOutcome, directory: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(directory, d, dirs_exist_ok=True)
        tune.report(outcome.to_result(), checkpoint=tune.Checkpoint.from_directory(d))
