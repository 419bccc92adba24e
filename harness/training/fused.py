"""A configuration's seeds trained together: ``SeedGroup`` (horizontally fused training).

A study trains every configuration with the same seeds. ``SeedGroup(cfgs, data)`` takes k trial
configurations that differ only in ``train.seed`` and trains them in one process, either

- fused (``fused=True``; the default on CUDA): ONE model whose parameters are the k replicas'
  parameters stacked along a new leading axis; every step runs one forward and one backward over
  the k replicas' batches (batched matrix products, ``harness.model.stacked``) and one AdamW step
  over the stacked tensors. Each replica keeps its own initial weights, data order (its own
  sampler), dropout masks (its own generator, drawn as its separate run draws them), optimizer
  moments and gradient clipping (the norm of its own slice), so each seed's records are those of
  its separate run up to floating-point summation order (Wang et al., "Horizontally Fused Training
  Array", MLSys 2021, fuse hyper-parameter trials the same way); or
- interleaved (``fused=False``): k ordinary ``Trainer`` runs advanced record by record, which is
  exactly the separate runs.

``members`` are the seeds' ``Trainer`` objects: their checkpoints (``save``/``save_best``/``restore``)
are the ordinary ``trainer.pt`` of that seed, so a seed resumes alone or in a group alike.
``run()`` yields ``(i, record)`` for member i: its step, evaluation and final records as its
``Trainer.run`` would yield them; every member's ``FinalRecord`` comes after all other records.

Only the plain cross-encoder on a BERT-like encoder fuses (``harness.model.stacked.unstackable`` says why not);
other models interleave under ``fused=None`` and are refused under ``fused=True``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from harness.config import TrialConfig
from harness.errors import ConfigError
from harness.training._fused_group import FusedEngine, Member, fused_pays, unfusable
from harness.training.loop import FinalRecord, Record, Trainer
from harness.training.tokenized import PreparedData


def _check_group(cfgs: Sequence[TrialConfig]) -> None:
    if not cfgs:
        raise ConfigError("a seed group needs at least one configuration")
    seeds = [c.train.seed for c in cfgs]
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"train.seed: a seed group's seeds must differ, got {seeds}")
    base = cfgs[0]
    for c in cfgs[1:]:
        if replace(c, train=replace(c.train, seed=base.train.seed)) != base:
            raise ConfigError("a seed group's configurations may differ only in train.seed "
                              f"(seed {c.train.seed} differs from seed {base.train.seed} elsewhere)")


class SeedGroup:
    """k seeds of one configuration trained in one process (module docstring)."""

    def __init__(self, cfgs: Sequence[TrialConfig], data: PreparedData, *, fused: bool | None = None,
                 log_every: int = 10) -> None:
        _check_group(cfgs)
        self.cfgs = list(cfgs)
        self.data = data
        self.log_every = log_every
        self.members: list[Trainer] = [Member(c, data, log_every=log_every) for c in self.cfgs]
        self.fused = self._decide(fused)
        self._engine: Any = None
        if self.fused:
            self._engine = FusedEngine(self.members)  # type: ignore[arg-type]

    def _decide(self, fused: bool | None) -> bool:
        first = self.members[0]
        why = unfusable(first)
        if fused is True and why:
            raise ConfigError(f"fused seeds (resources.seeds_per_trial): {why}")
        if fused is not None:
            return fused
        return not why and fused_pays(first.device, len(self.members))

    def run(self) -> Iterator[tuple[int, Record]]:
        if self._engine is not None:
            yield from self._engine.run()
            return
        yield from _interleave([m.run() for m in self.members])


def _interleave(runs: list[Iterator[Record]]) -> Iterator[tuple[int, Record]]:
    """Advances each run by one record in turn; final records are held back until every run has
    produced its own, then come in member order."""
    finals: dict[int, FinalRecord] = {}
    live = list(range(len(runs)))
    while live:
        for i in list(live):
            rec = next(runs[i], None)
            if rec is None:
                live.remove(i)
            elif isinstance(rec, FinalRecord):
                finals[i] = rec
            else:
                yield i, rec
    for i in sorted(finals):
        yield i, finals[i]
