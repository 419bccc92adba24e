"""One trial, run one way: the Tune trainable (harness.driver._trainable) and ``harness train``
(harness.cli.train) both call ``run_trial`` and differ only in their ``TrialSink``.

Lifecycle: ``run_trial`` drives ``Trainer.run()`` to its end and hands the sink, in order, a
``StepRecord`` at each logging step (``step``), a ``DevPoint`` at each evaluation (``evaluation``;
the trainer's state is then the one a checkpoint would save), and once, at the end, the trial's
``TrialOutcome`` with the trainer's ``FinalRecord`` (``finished``). What a seed run keeps besides its
metrics, the TREC run files of its best-dev checkpoint, ``write_trial_files`` writes for either sink.
No Ray, no MLflow here.

A seed group (``resources.seeds_per_trial``) runs through ``run_group``: its sink gets each
member's step records, then per evaluation step one call with every member's ``DevPoint`` (once all
members have evaluated that step), and at the end one call with every member's outcome.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from harness.study.protocol import DevPoint, TrialOutcome, TrialTicket

if TYPE_CHECKING:
    from harness.records import Splits
    from harness.training.fused import SeedGroup
    from harness.training.loop import EvalRecord, FinalRecord, StepRecord, Trainer


class TrialSink(Protocol):
    """Where a trial's records go (see the module docstring for the order of the calls)."""

    def step(self, rec: StepRecord) -> None: ...

    def evaluation(self, rec: EvalRecord, point: DevPoint) -> None: ...

    def finished(self, outcome: TrialOutcome, final: FinalRecord) -> None: ...


def run_trial(ticket: TrialTicket, trainer: Trainer, sink: TrialSink, *, metric: str) -> None:
    """Train ``ticket``'s configuration with ``trainer`` (restored already, where resuming) to its
    end; ``metric``: the outcome's objective metric (a study's objective, or train.select_metric)."""
    from harness.training.loop import EvalRecord, FinalRecord

    started = time.time()
    for rec in trainer.run():
        if isinstance(rec, EvalRecord):
            sink.evaluation(rec, DevPoint(ticket.key, rec.step, rec.metrics, dict(trainer.best_dev),
                                          rec.best_value))
        elif isinstance(rec, FinalRecord):
            # rec.dev is the best-dev checkpoint's dev metrics, selected by train.select_metric,
            # which a study sets to its objective metric: the same value every dev report carried.
            outcome = TrialOutcome.from_final(ticket.key, rec, metric=metric,
                                              select_metric=trainer.cfg.train.select_metric,
                                              evaluation=trainer.data.splits.evaluation, started=started,
                                              ended=time.time())
            sink.finished(outcome, rec)
        else:
            sink.step(rec)


class GroupSink(Protocol):
    """Where a seed group's records go (``run_group``)."""

    def step(self, member: TrialTicket, rec: StepRecord) -> None: ...

    def evaluation(self, step: int, points: list[DevPoint]) -> None: ...

    def finished(self, ends: list[tuple[TrialTicket, TrialOutcome, FinalRecord]]) -> None: ...


def run_group(ticket: TrialTicket, group: SeedGroup, sink: GroupSink, *, metric: str) -> None:
    """``run_trial`` for a seed group: ``group.members[i]`` trains ``ticket.members()[i]``. An
    evaluation step reaches the sink once every member has evaluated it; the outcomes once every
    member has finished."""
    from harness.training.loop import EvalRecord, FinalRecord

    tickets = ticket.members()
    if len(tickets) != len(group.members):
        raise ValueError(f"trial {ticket.key}: {len(tickets)} seeds but {len(group.members)} trainers")
    started = time.time()
    evals: dict[int, dict[int, DevPoint]] = {}
    finals: dict[int, FinalRecord] = {}
    for i, rec in group.run():
        member, trainer = tickets[i], group.members[i]
        if isinstance(rec, EvalRecord):
            at = evals.setdefault(rec.step, {})
            at[i] = DevPoint(member.key, rec.step, rec.metrics, dict(trainer.best_dev), rec.best_value)
            if len(at) == len(tickets):
                sink.evaluation(rec.step, [at[j] for j in range(len(tickets))])
                del evals[rec.step]
        elif isinstance(rec, FinalRecord):
            finals[i] = rec
        else:
            sink.step(member, rec)
    ended = time.time()
    sink.finished([(tickets[i], TrialOutcome.from_final(
        tickets[i].key, finals[i], metric=metric, select_metric=group.members[i].cfg.train.select_metric,
        evaluation=group.members[i].data.splits.evaluation, started=started, ended=ended), finals[i])
        for i in range(len(tickets))])


def write_trial_files(folder: str | Path, ticket: TrialTicket, splits: Splits, final: FinalRecord) -> list[Path]:
    """The seed run's files of its best checkpoint under ``folder``: the TREC run files
    ``runs/dev.trec`` and ``runs/test.trec`` (every candidate's score under the best-dev checkpoint,
    tagged ``<config>.seed<seed>``; harness.metrics.trec). Returns the files written."""
    from harness.metrics.trec import run_file_artifacts, run_tag, split_qrels

    qrels = split_qrels(splits)
    runs = {s: r for s, r in final.runs.items() if s in qrels}
    if not runs:
        return []
    return run_file_artifacts(folder, runs=runs, qrels=qrels, tag=run_tag(ticket.name, ticket.seed))
