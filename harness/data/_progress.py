"""Throttled progress lines (percent and ETA) for long data builds.

A build reports through a plain ``Callable[[str], None]`` (the CLI passes one that writes to
stderr); ``Ticker`` turns per-item advances into a line every ``step`` percent or ``every``
seconds, whichever comes first, never one per item.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Progress = Callable[[str], None]


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    minutes, sec = divmod(whole, 60)
    return f"{minutes}m{sec:02d}s" if minutes else f"{sec}s"


class Ticker:
    """Counts ``total`` units of work named ``what`` and reports through ``progress``.

    >>> lines = []
    >>> t = Ticker(lines.append, "queries", total=4, step=50.0)
    >>> for _ in range(4): t.advance()
    >>> lines[-1].startswith("queries: 100%")
    True
    """

    def __init__(self, progress: Progress | None, what: str, *, total: int, step: float = 10.0,
                 every: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._progress = progress
        self._what = what
        self._total = max(total, 0)
        self._step = step
        self._every = every
        self._clock = clock
        self._start = clock()
        self._last_time = self._start
        self._next_pct = step
        self.done = 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._progress is None or self._total == 0:
            return
        pct = 100.0 * self.done / self._total
        now = self._clock()
        if pct < self._next_pct and now - self._last_time < self._every and self.done < self._total:
            return
        while self._next_pct <= pct:
            self._next_pct += self._step
        self._last_time = now
        elapsed = now - self._start
        if self.done >= self._total:
            tail = f"done in {_duration(elapsed)}"
        else:
            tail = f"ETA {_duration(elapsed / max(self.done, 1) * (self._total - self.done))}"
        self._progress(f"{self._what}: {pct:3.0f}% ({self.done:,}/{self._total:,}), {tail}")
