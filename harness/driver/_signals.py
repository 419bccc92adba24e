"""Stop signals in the driver (docs/reliability.md, "An interrupted driver"): SIGINT (Ctrl-C, or to
the driver's process group), SIGTERM and SIGHUP raise ``StudyInterrupted`` in the main thread, so
the driver ends its study's MLflow runs KILLED and says how to resume; the command exits 128 + the
signal's number (harness.cli.dispatch)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

__all__ = ["STOP_SIGNALS", "StudyInterrupted", "deferred_stops", "install_stop_handlers", "interrupts", "stopped_by"]


class StudyInterrupted(KeyboardInterrupt):
    """The driver got a stop signal (SIGINT from Ctrl-C or its process group, SIGTERM, SIGHUP);
    ``signum`` says which, so the command exits 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


# The stop signals received in this driver, latest last: Ray's blocking calls (ray.get, ray.wait)
# turn any KeyboardInterrupt raised by a handler while they wait into a plain KeyboardInterrupt, so
# the signal's number is kept here as well (``stopped_by``).
_received: list[int] = []


def _raise_interrupted(signum: int, _frame: object) -> None:
    _received.append(signum)
    _quiet_abandoned_connections()
    raise StudyInterrupted(signum)


def _quiet_abandoned_connections() -> None:
    """A stop raised inside a store query makes SQLAlchemy drop that connection and then fail to
    close its cursor, which it logs as an ERROR with a traceback ("Error closing cursor") on its
    pool's logger; after a stop that is expected, and the driver says itself what it ends."""
    logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)


def stopped_by(exc: BaseException) -> BaseException:
    """``exc`` as the stop that caused it: a plain KeyboardInterrupt after a stop signal was received
    becomes ``StudyInterrupted`` of that signal (so SIGTERM still exits 143); anything else is
    returned as it is."""
    if type(exc) is KeyboardInterrupt and _received:
        return StudyInterrupted(_received[-1])
    return exc


def install_stop_handlers() -> None:
    """Every stop signal raises ``StudyInterrupted`` in the driver's main thread. Installed again
    after ``ray.init``, which sets its own SIGTERM handler (a bare exit that ends no MLflow run)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in STOP_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _raise_interrupted)


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """``install_stop_handlers`` for the block, the previous handlers (and the SQLAlchemy pool
    logger's level, which a stop lowers) restored after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = [getattr(signal, n) for n in STOP_SIGNALS if hasattr(signal, n)]
    previous = {s: signal.getsignal(s) for s in sigs}
    pool_level = logging.getLogger("sqlalchemy.pool").level  # a stop silences it (_quiet_abandoned_connections)
    _received.clear()
    install_stop_handlers()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        logging.getLogger("sqlalchemy.pool").setLevel(pool_level)


@contextlib.contextmanager
def deferred_stops() -> Iterator[None]:
    """Stop signals wait until the block ends (then the latest one is raised)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    sigs = [getattr(signal, n) for n in STOP_SIGNALS if hasattr(signal, n)]
    previous = {s: signal.signal(s, lambda signum, _f: got.append(signum)) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if got:
        _received.append(got[-1])
        raise StudyInterrupted(got[-1])
