"""One driver per study whatever the working directory: a lease held in the tracking store, on the
study's MLflow experiment, beside the storage lease (harness.driver._lease).

The storage lease is a file beside ``storage_path``, which resolves per working directory (the
default ``storage_path: runs``): two drivers of one study started from two directories hold two
different files, yet write to one experiment. The records live in the experiment, so the guard
lives there too: experiment tag ``harness.driver`` holds the driver's holder record (the storage
lease's JSON: host, pid, start, heartbeat, resume command, token).

``acquire()`` reads the tag; a live holder (heartbeat younger than the timeout, and not a dead pid on
this host) that is not this driver refuses the study with ``LeaseHeld`` (one line: who, since when).
Otherwise it writes its own holder, waits ``settle_s`` and reads the tag again: a driver that wrote
in between (both read an empty tag) is seen, and of the two exactly one (the last writer) finds its
own token and goes on; the other is refused. ``settle_s`` (0.5 s, at least three times the store's
measured write time) bounds the window in which two drivers can both read before either writes. A
daemon thread rewrites the heartbeat every ``timeout / 4`` while the driver lives; a store that is
briefly unreachable only delays a heartbeat. ``release()`` deletes the tag if it is still ours.

A driver killed with SIGKILL leaves the tag: on its host the next driver takes over at once (its pid
is dead), elsewhere once the heartbeat is older than the timeout (``$HARNESS_LEASE_TIMEOUT_S``,
default 60 s), as with the storage lease. No Ray import here.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from harness.driver._lease import Holder, LeaseHeld, StudyLease, _iso, lease_timeout
from harness.errors import HarnessError
from harness.tracking.conventions import TAG_DRIVER


class StoreLease:
    """The study's lease on its MLflow experiment (module docstring); a context manager."""

    def __init__(self, client: Any, experiment_id: str, *, study: str, resume: str, where: str,
                 timeout_s: float | None = None, settle_s: float = 0.5,
                 log: Callable[[str], None] | None = None, host: str | None = None,
                 pid: int | None = None) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.where = where  # the tracking URI, for messages
        self.settle_s = settle_s
        self.log = log or (lambda msg: None)
        # The storage lease's rules for staleness and its refusal text, on another medium.
        self._rules = StudyLease(study, study=study, resume=resume,
                                 timeout_s=lease_timeout() if timeout_s is None else timeout_s,
                                 host=host, pid=pid)
        self.token = secrets.token_hex(8)
        self.started = 0.0
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def read(self) -> Holder | None:
        tags = self.client.get_experiment(self.experiment_id).tags
        text = tags.get(TAG_DRIVER)
        if not text:
            return None
        try:
            return Holder.parse(text)
        except (ValueError, KeyError, TypeError):
            return None  # not a holder record: nothing to respect

    def _write(self, now: float) -> float:
        r = self._rules
        mine = Holder(study=r.study, host=r.host, pid=r.pid, started=self.started or now, heartbeat=now,
                      resume=r.resume, token=self.token)
        t0 = time.monotonic()
        self.client.set_experiment_tag(self.experiment_id, TAG_DRIVER, mine.dump())
        return time.monotonic() - t0

    def acquire(self) -> None:
        """Take the study, taking over a stale holder; raise ``LeaseHeld`` while another driver
        holds it."""
        holder = self.read()
        if holder is not None and holder.token != self.token:
            reason = self._rules.stale_reason(holder)
            if reason is None:
                raise LeaseHeld(self._refusal(holder))
            self.log(f"lease: taking over study {self._rules.study!r} in the tracking store from pid "
                     f"{holder.pid} on host {holder.host} ({reason})")
        now = time.time()
        self.started = now
        try:
            took = self._write(now)
        except Exception as exc:  # noqa: BLE001 -- MLflow's error for a tag another driver just created
            holder = self.read()
            if holder is not None and holder.token != self.token:
                raise LeaseHeld(self._refusal(holder)) from None
            raise HarnessError(f"study {self._rules.study!r}: could not write the lease on MLflow experiment "
                               f"{self._rules.study!r} at {self.where}: {str(exc).splitlines()[0][:200]}") from None
        time.sleep(max(self.settle_s, 3 * took))
        holder = self.read()
        if holder is None or holder.token != self.token:
            # Another driver wrote after us: it holds the study (it will find its own token).
            raise LeaseHeld(self._refusal(holder) if holder is not None else
                            f"study {self._rules.study!r}: another driver took the study in the tracking "
                            f"store {self.where} at the same time; run one `harness run` per study")
        self.held = True
        self._thread = threading.Thread(target=self._beat, name="harness-store-lease", daemon=True)
        self._thread.start()

    def _refusal(self, holder: Holder) -> str:
        r = self._rules
        wait = max(0, math.ceil(r.timeout_s - (time.time() - holder.heartbeat)))
        same_host = " (at once, once that pid has exited)" if holder.host == r.host else ""
        return (f"study {r.study!r} is already being run by pid {holder.pid} on host {holder.host} "
                f"since {_iso(holder.started)} (from any working directory: the lease is tag {TAG_DRIVER} "
                f"of MLflow experiment {r.study!r} at {self.where}); wait for it, or if that driver is "
                f"gone run `{holder.resume}` after {wait} s{same_host}")

    def _beat(self) -> None:
        every = self._rules.timeout_s / 4
        while not self._stop.wait(every):
            try:
                self._write(time.time())
            except Exception as exc:  # noqa: BLE001 -- the store may be briefly away: the next beat tries again
                if not self._warned:
                    self._warned = True
                    self.log(f"lease: could not renew the study's lease in the tracking store "
                             f"({type(exc).__name__}); trying again")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if not self.held:
            return
        self.held = False
        with contextlib.suppress(Exception):
            holder = self.read()
            if holder is not None and holder.token == self.token:
                self.client.delete_experiment_tag(self.experiment_id, TAG_DRIVER)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
