"""Seeds of one configuration trained together in one process: a ``SeedGroup``.

A group holds one ``Trainer`` per seed (``members``; each saves, restores and reports as a trainer
alone does) and ``run()`` interleaves them: each member runs to its next record in turn, and every
record comes out as ``(member index, record)``, in the order the members produced them. Each member
sets its own random state at every step (harness.training.loop), so a member's records are those of
its separate training. ``fused`` says whether the members share one fused model; this group never
fuses (``fused=True`` is refused), so its seeds cost what separate trials cost, in one process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harness.config import TrialConfig
from harness.training.loop import Record, Trainer


class SeedGroup:
    """k trainers of one configuration (seeds differ); ``run()`` yields ``(i, record)``."""

    def __init__(self, cfgs: list[TrialConfig], data: Any, *, fused: bool | None = None,
                 log_every: int = 10) -> None:
        if not cfgs:
            raise ValueError("a seed group needs at least one configuration")
        if fused:
            raise ValueError("this seed group trains its members separately (fused=False)")
        self.fused = False
        self.members = [Trainer(cfg, data, log_every=log_every) for cfg in cfgs]

    def run(self) -> Iterator[tuple[int, Record]]:
        """Every member to its end, each advanced to its next record in turn."""
        running = {i: m.run() for i, m in enumerate(self.members)}
        while running:
            for i in list(running):
                rec = next(running[i], None)
                if rec is None:
                    del running[i]
                else:
                    yield i, rec
