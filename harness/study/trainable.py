"""The worker side of a study: the Tune trainable (runs in Ray workers).

One trial = one ticket (harness.study.protocol): it trains its configuration, reports a ``DevPoint``
at every evaluation, with a checkpoint at its first evaluation and then at the first evaluation at
least ``checkpoint_every_s`` seconds after the last checkpoint (study key
``failure.checkpoint_every_s``; 0: at every evaluation), and ends with one ``TrialOutcome`` whose checkpoint directory
holds the outcome, the per-query values and the seed run's further files (``write_trial_files``).
A trial recorded as finished in MLflow, or restored from its outcome checkpoint, replays its outcome
instead of training again.

Test hooks are injected (``TrialHooks``, passed to ``run_study``), never read from the environment.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

from harness.heap import paused
from harness.study.protocol import DevPoint, TrialOutcome, TrialTicket, read_outcome, write_outcome
from harness.study.variants import variant_key


@dataclass(frozen=True)
class TrialHooks:
    """Testing hooks of the trainable; the default does nothing.

    ``trial_log``: a file that gets a line per trial event ("<key> start <step>", "<key> end
    <step>", "<key> replay"). ``fail_once_dir``: a directory; every trial fails once, after its
    first checkpointed evaluation (a marker file per trial key remembers it). ``hold``: (file, trial
    key): that trial waits after its first checkpointed evaluation until the file exists."""

    trial_log: str | None = None
    fail_once_dir: str | None = None
    hold: tuple[str, str] | None = None

    def note(self, key: str, event: str) -> None:
        if self.trial_log:
            with open(self.trial_log, "a") as fh:
                fh.write(f"{key} {event}\n")

    def after_evaluation(self, key: str, step: int) -> None:
        if self.hold and key == self.hold[1]:
            while not Path(self.hold[0]).exists():
                time.sleep(0.2)
        if not self.fail_once_dir:
            return
        marker = Path(self.fail_once_dir, key)
        if not marker.exists():
            marker.touch()
            raise RuntimeError(f"injected failure in {key} at step {step} (testing hook)")


NO_HOOKS = TrialHooks()


def write_trial_files(artifacts: Path, ticket: TrialTicket, trainer: Any, final: Any) -> None:
    """Files of the trial's best checkpoint for its seed run, written into ``artifacts`` (the
    outcome checkpoint's artifacts/ folder): the driver logs each at its relative path as an
    artifact of the seed run. ``final`` is the trainer's FinalRecord. Today: the TREC run files
    ``runs/dev.trec`` and ``runs/test.trec`` (every candidate's score under the best-dev checkpoint,
    tagged ``<config>.seed<seed>``; harness.evaluation.trec)."""
    from harness.evaluation.trec import run_file_artifacts, run_tag, split_qrels

    qrels = split_qrels(trainer.data.splits)
    runs = {s: r for s, r in final.runs.items() if s in qrels}
    if runs:
        run_file_artifacts(artifacts, runs=runs, qrels=qrels, tag=run_tag(ticket.name, ticket.seed))


def trainable(config: dict[str, Any], *, prepared: dict[str, Any], metric: str,
              finished: dict[str, float], hooks: TrialHooks = NO_HOOKS, checkpoint_every_s: float = 0.0) -> None:
    ticket = TrialTicket.from_tune(config)
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
    # Imports torch and transformers (the first trial of an actor) and builds the model: ~1 s of
    # full collections otherwise (harness.heap). A replayed trial above needs neither.
    with paused():
        import torch

        from harness.training.loop import EvalRecord, FinalRecord, Trainer

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
        trainer = Trainer(cfg, data)
    if ckpt is not None:
        with ckpt.as_directory() as d:
            trainer.restore(d)
    hooks.note(ticket.key, f"start {trainer.step}")
    started = time.time()
    # A checkpoint (Trainer.save, then Tune's copy into storage) costs 0.3-0.4 s with the packaged
    # encoder on the idle 2-core machine, 0.6-1.6 s under load (benchmarks/results/checkpoint.md):
    # at every evaluation that is 2.5-13% of a 2-minute trial. A resumed trial's checkpoint counts
    # as just written.
    last_ckpt = time.monotonic() if ckpt is not None else None
    for rec in trainer.run():
        if isinstance(rec, EvalRecord):
            point = DevPoint(ticket.key, rec.step, rec.metrics, dict(trainer.best_dev), rec.best_value)
            if last_ckpt is not None and time.monotonic() - last_ckpt < checkpoint_every_s:
                tune.report(point.to_result())
                continue
            with tempfile.TemporaryDirectory() as d:
                trainer.save(d)
                tune.report(point.to_result(), checkpoint=tune.Checkpoint.from_directory(d))
            last_ckpt = time.monotonic()
            hooks.after_evaluation(ticket.key, rec.step)
        elif isinstance(rec, FinalRecord):
            # rec.dev is the best-dev checkpoint's dev metrics, selected by train.select_metric,
            # which a study sets to its objective metric: the same value every dev report carried.
            outcome = TrialOutcome.from_final(ticket.key, rec, metric=metric, select_metric=cfg.train.select_metric,
                                              evaluation=data.splits.evaluation, started=started, ended=time.time())
            with tempfile.TemporaryDirectory() as d:
                write_trial_files(write_outcome(d, outcome, rec.per_query), ticket, trainer, rec)
                trainer.save_best(d)  # the best-dev weights, for `harness export` and MLflow models
                tune.report(outcome.to_result(), checkpoint=tune.Checkpoint.from_directory(d))
            hooks.note(ticket.key, f"end {trainer.step}")


def _report_outcome(outcome: TrialOutcome, directory: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(directory, d, dirs_exist_ok=True)
        tune.report(outcome.to_result(), checkpoint=tune.Checkpoint.from_directory(d))
