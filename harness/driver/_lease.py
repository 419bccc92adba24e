"""One driver per study: a lease file beside the study's Ray Tune state.

Lifecycle (``run_study`` holds it around everything it records):
1. ``acquire()`` creates ``<storage_path>/<study>.lease`` with ``os.open(O_CREAT | O_EXCL)``, so of two
   drivers racing for a study exactly one succeeds. The file is JSON: host, pid, start time, a
   heartbeat timestamp, the command that resumes the study, and a random token naming this holder.
2. A daemon thread rewrites the heartbeat every ``timeout_s / 4`` seconds while the driver lives.
3. ``release()`` (also on an exception) stops the thread and removes the file if it is still ours.

A lease is *stale*, and the next driver takes it over (logging whose it was), when its heartbeat is
older than ``timeout_s`` (default 60 s, ``$HARNESS_LEASE_TIMEOUT_S``), or at once when it was written
on this host by a pid that is no longer alive (a driver killed with SIGKILL). Otherwise ``acquire``
raises ``LeaseHeld`` with one line: who holds the study, since when, and when ``--resume`` may take
it over. A takeover renames the stale file to a unique name first and checks that what it moved is
what it judged stale, so two drivers taking over together cannot both win.

Only a local (or mounted shared) ``storage_path`` is leased; for remote storage (``s3://``...) there
is no atomic create to build on, and ``run_study`` says that it runs unguarded. No Ray import here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

from harness.errors import HarnessError

TIMEOUT_ENV = "HARNESS_LEASE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0


class LeaseHeld(HarnessError):
    """Another live driver holds the study."""


@dataclass(frozen=True, kw_only=True)
class Holder:
    """The content of a lease file."""

    study: str
    host: str
    pid: int
    started: float  # epoch seconds
    heartbeat: float  # epoch seconds
    resume: str  # the command that finishes the study
    token: str

    @classmethod
    def parse(cls, text: str) -> Holder:
        d = json.loads(text)
        return cls(study=str(d["study"]), host=str(d["host"]), pid=int(d["pid"]),
                   started=float(d["started"]), heartbeat=float(d["heartbeat"]),
                   resume=str(d["resume"]), token=str(d["token"]))

    def dump(self) -> str:
        return json.dumps({**asdict(self), "started_at": _iso(self.started)}, indent=1)


def lease_timeout(default: float = DEFAULT_TIMEOUT_S) -> float:
    """$HARNESS_LEASE_TIMEOUT_S, else ``default``; it must be a positive number of seconds."""
    raw = os.environ.get(TIMEOUT_ENV)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise HarnessError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process on this host (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class StudyLease:
    """The lease on one study (module docstring); a context manager around ``acquire``/``release``."""

    def __init__(self, path: str | os.PathLike[str], *, study: str, resume: str,
                 timeout_s: float | None = None, log: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.time, host: str | None = None,
                 pid: int | None = None) -> None:
        self.path = Path(path)
        self.study = study
        self.resume = resume
        self.timeout_s = lease_timeout() if timeout_s is None else float(timeout_s)
        self.log = log or (lambda msg: None)
        self.clock = clock
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid
        self.token = secrets.token_hex(8)
        self.started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held = False

    # -- reading ---------------------------------------------------------------------------------

    def read(self) -> Holder | None:
        """The current holder, or None when there is no lease file."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            return Holder.parse(text)
        except (ValueError, KeyError, TypeError):
            # A driver killed between create and first write leaves an empty or partial file: its
            # age is the file's mtime.
            mtime = _mtime(self.path)
            return Holder(study=self.study, host="?", pid=0, started=mtime, heartbeat=mtime,
                          resume=self.resume, token="")

    def stale_reason(self, holder: Holder) -> str | None:
        """Why ``holder`` no longer holds the study, or None while it does."""
        age = self.clock() - holder.heartbeat
        if age > self.timeout_s:
            return f"no heartbeat for {age:.0f} s (timeout {self.timeout_s:g} s)"
        if holder.host == self.host and holder.pid > 0 and holder.pid != self.pid and not pid_alive(holder.pid):
            return f"pid {holder.pid} is no longer running on {holder.host}"
        return None

    # -- acquire / release -----------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the study, taking over a stale lease; raise ``LeaseHeld`` if a live driver has it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            now = self.clock()
            mine = Holder(study=self.study, host=self.host, pid=self.pid, started=now, heartbeat=now,
                          resume=self.resume, token=self.token)
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.read()
                if holder is None:
                    continue  # released meanwhile
                reason = self.stale_reason(holder)
                if reason is None:
                    raise LeaseHeld(self._refusal(holder)) from None
                if self._remove_stale(holder):
                    self.log(f"lease: taking over study {self.study!r} from pid {holder.pid} on host "
                             f"{holder.host} ({reason})")
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(mine.dump())
            self.started = now
            self.held = True
            self._start_heartbeat()
            return
        raise LeaseHeld(f"study {self.study!r}: could not take the lease {self.path} (other drivers "
                        "keep taking it); try again")

    def release(self) -> None:
        """Stop the heartbeat and remove the lease file if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if not self.held:
            return
        self.held = False
        holder = self.read()
        if holder is not None and holder.token == self.token:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- internals -------------------------------------------------------------------------------

    def _refusal(self, holder: Holder) -> str:
        wait = max(0, math.ceil(self.timeout_s - (self.clock() - holder.heartbeat)))
        same_host = " (at once, once that pid has exited)" if holder.host == self.host else ""
        return (f"study {self.study!r} is already being run by pid {holder.pid} on host {holder.host} "
                f"since {_iso(holder.started)}; wait for it, or if that driver is gone run "
                f"`{holder.resume}` after {wait} s{same_host} (lease {self.path})")

    def _remove_stale(self, holder: Holder) -> bool:
        """Move the stale lease aside; True when what was moved is ``holder`` (else put it back)."""
        aside = self.path.with_name(f"{self.path.name}.stale-{self.token}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        try:
            moved = Holder.parse(aside.read_text())
        except (ValueError, KeyError, TypeError):
            moved = None
        if moved is not None and moved.token != holder.token:
            # Another driver took over between our read and our rename: give its lease back.
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            aside.unlink()
            return False
        aside.unlink()
        return True

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        interval = max(0.05, self.timeout_s / 4)
        self._thread = threading.Thread(target=self._beat, args=(interval,), daemon=True,
                                        name=f"lease-{self.study}")
        self._thread.start()

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval):
            holder = self.read()
            if holder is None or holder.token != self.token:
                self.log(f"lease: study {self.study!r} was taken over by another driver "
                         f"({'none' if holder is None else f'pid {holder.pid} on {holder.host}'}); "
                         "this driver no longer holds it")
                return
            beat = Holder(**{**asdict(holder), "heartbeat": self.clock()})
            tmp = self.path.with_name(f"{self.path.name}.{self.token}.tmp")
            try:
                tmp.write_text(beat.dump())
                os.replace(tmp, self.path)
            except OSError as exc:
                self.log(f"lease: heartbeat of study {self.study!r} failed: {exc}")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
