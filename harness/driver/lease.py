"""One driver per study: one lease, held on two media.

``run_study`` holds two leases on the study around everything it records (docs/early-stopping.md,
"One driver per study"): a file beside the study's Ray Tune state (``Lease.on_file``) and a tag on
the study's MLflow experiment (``Lease.on_experiment``), because ``storage_path`` resolves per
working directory while the records live in one experiment. Both follow one lifecycle, ``Lease``:

1. ``acquire()`` reads the holder record (JSON: study, host, pid, start, heartbeat, the command that
   resumes the study, a random token naming the holder). A live holder that is not this driver
   refuses the study with ``LeaseHeld``: one line, who holds it, since when, and when ``--resume``
   may take it over. A *stale* holder is taken over (logged): its heartbeat is older than
   ``timeout_s`` (default 60 s, ``$HARNESS_LEASE_TIMEOUT_S``), or it was written on this host by a
   pid that is no longer alive (a driver killed with SIGKILL). Then the medium claims the lease for
   this driver; a claim lost to another driver looks again (at most five times).
2. A daemon thread rewrites the heartbeat every ``timeout_s / 4`` seconds while the driver lives,
   and stops (logged) once another driver has taken the lease over; a medium briefly unreachable
   only delays a beat.
3. ``release()`` (also on an exception) stops the thread and removes the record if it is still ours.

The media differ only in how a claim is made atomic:

- ``FileMedium``: ``<storage_path>/<study>.lease``, created with ``os.open(O_CREAT | O_EXCL)``, so of
  two drivers racing exactly one succeeds; a stale file is renamed aside to a unique name first and
  what was moved is checked to be what was judged stale, so two drivers taking over together cannot
  both win. An empty or partial file (a driver killed between create and write) ages by its mtime.
  Only a local (or mounted shared) ``storage_path`` has one: remote storage (``s3://``) has no
  atomic create, and the tag guards it alone.
- ``TagMedium``: experiment tag ``harness.driver``. A tag has no atomic create: the claim writes it,
  waits ``settle_s`` and reads it again, so of two drivers that both read an empty tag exactly one
  (the last writer) finds its own token; the other is refused. ``settle_s`` (0.5 s, at least three
  times the store's measured write time) bounds the window in which two drivers can both read
  before either writes.

No Ray import here.
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
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, Self

from harness.errors import HarnessError
from harness.tracking.conventions import TAG_DRIVER

TIMEOUT_ENV = "HARNESS_LEASE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
CLAIM_TRIES = 5


class LeaseHeld(HarnessError):
    """Another live driver holds the study."""


@dataclass(frozen=True, kw_only=True)
class Holder:
    """The holder record of a lease (a file's content, a tag's value)."""

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


class Medium(Protocol):
    """Where a lease's holder record lives. ``place`` (in the takeover log line), ``note`` (after
    "since ..." in the refusal), ``tail`` (at the refusal's end) and ``name`` say where it is."""

    place: str
    note: str
    tail: str
    name: str

    def read(self, lease: Lease) -> Holder | None:
        """The current holder, or None when there is none."""

    def claim(self, mine: Holder) -> bool:
        """Make ``mine`` the holder if there is none; False when another driver got there first."""

    def remove_stale(self, holder: Holder, token: str) -> bool:
        """Clear the stale ``holder``; False when it is no longer what was judged stale."""

    def write(self, mine: Holder) -> None:
        """Rewrite our own record (a heartbeat)."""

    def delete(self) -> None:
        """Remove the record (ours: ``release`` checked)."""


class Lease:
    """The lease on one study (module docstring); a context manager around ``acquire``/``release``."""

    def __init__(self, medium: Medium, *, study: str, resume: str, timeout_s: float | None = None,
                 log: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time,
                 host: str | None = None, pid: int | None = None) -> None:
        self.medium = medium
        self.study = study
        self.resume = resume
        self.timeout_s = lease_timeout() if timeout_s is None else float(timeout_s)
        self.log = log or (lambda msg: None)
        self.clock = clock
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid
        self.token = secrets.token_hex(8)
        self.started = 0.0
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def on_file(cls, path: str | os.PathLike[str], **kw: Any) -> Lease:
        """The lease file ``path`` (``<storage_path>/<study>.lease``)."""
        return cls(FileMedium(Path(path)), **kw)

    @classmethod
    def on_experiment(cls, client: Any, experiment_id: str, *, study: str, where: str, settle_s: float = 0.5,
                      **kw: Any) -> Lease:
        """The tag ``harness.driver`` of the study's MLflow experiment (named ``study``); ``where``:
        the tracking URI."""
        medium = TagMedium(client, experiment_id, experiment=study, where=where, settle_s=settle_s)
        return cls(medium, study=study, **kw)

    # -- the rules -------------------------------------------------------------------------------

    def read(self) -> Holder | None:
        return self.medium.read(self)

    def stale_reason(self, holder: Holder) -> str | None:
        """Why ``holder`` no longer holds the study, or None while it does."""
        age = self.clock() - holder.heartbeat
        if age > self.timeout_s:
            return f"no heartbeat for {age:.0f} s (timeout {self.timeout_s:g} s)"
        if holder.host == self.host and holder.pid > 0 and holder.pid != self.pid and not pid_alive(holder.pid):
            return f"pid {holder.pid} is no longer running on {holder.host}"
        return None

    def refusal(self, holder: Holder) -> str:
        """The one line a refused driver prints: who holds the study, since when, what to run when."""
        wait = max(0, math.ceil(self.timeout_s - (self.clock() - holder.heartbeat)))
        same_host = " (at once, once that pid has exited)" if holder.host == self.host else ""
        return (f"study {self.study!r} is already being run by pid {holder.pid} on host {holder.host} "
                f"since {_iso(holder.started)}{self.medium.note}; wait for it, or if that driver is gone "
                f"run `{holder.resume}` after {wait} s{same_host}{self.medium.tail}")

    # -- acquire / release -----------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the study, taking over a stale holder; raise ``LeaseHeld`` if a live driver has it."""
        for _ in range(CLAIM_TRIES):
            holder = self.read()
            if holder is not None and holder.token != self.token:
                reason = self.stale_reason(holder)
                if reason is None:
                    raise LeaseHeld(self.refusal(holder))
                if not self.medium.remove_stale(holder, self.token):
                    continue
                self.log(f"lease: taking over study {self.study!r}{self.medium.place} from pid {holder.pid} "
                         f"on host {holder.host} ({reason})")
            self.started = self.clock()
            if self.medium.claim(self._mine()):
                self.held = True
                self._start_heartbeat()
                return
        raise LeaseHeld(f"study {self.study!r}: could not take the lease {self.medium.name} (other drivers "
                        "keep taking it); try again")

    def release(self) -> None:
        """Stop the heartbeat and remove the record if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if not self.held:
            return
        self.held = False
        try:
            holder = self.read()
            if holder is not None and holder.token == self.token:
                self.medium.delete()
        except Exception as exc:  # noqa: BLE001 -- a medium gone at the end: the record expires by its heartbeat
            self.log(f"lease: could not remove the lease {self.medium.name} ({_first_line(exc)}); it expires "
                     f"{self.timeout_s:g} s after its last heartbeat")

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- internals -------------------------------------------------------------------------------

    def _mine(self) -> Holder:
        return Holder(study=self.study, host=self.host, pid=self.pid, started=self.started,
                      heartbeat=self.clock(), resume=self.resume, token=self.token)

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        interval = max(0.05, self.timeout_s / 4)
        self._thread = threading.Thread(target=self._beat, args=(interval,), daemon=True,
                                        name=f"lease-{self.study}")
        self._thread.start()

    def _beat(self, interval: float) -> None:
        failing = False
        while not self._stop.wait(interval):
            try:
                holder = self.read()
                if holder is None or holder.token != self.token:
                    self.log(f"lease: study {self.study!r} was taken over by another driver{self.medium.place} "
                             f"({'none' if holder is None else f'pid {holder.pid} on {holder.host}'}); "
                             "this driver no longer holds it")
                    return
                self.medium.write(replace(holder, heartbeat=self.clock()))
                failing = False
            except Exception as exc:  # noqa: BLE001 -- the medium may be briefly away: the next beat tries again
                if not failing:
                    self.log(f"lease: heartbeat of study {self.study!r}{self.medium.place} failed "
                             f"({_first_line(exc)}); trying again")
                failing = True


class FileMedium:
    """A lease file beside the study's Ray Tune state (module docstring)."""

    place = ""
    note = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)
        self.tail = f" (lease {path})"

    def read(self, lease: Lease) -> Holder | None:
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
            return Holder(study=lease.study, host="?", pid=0, started=mtime, heartbeat=mtime,
                          resume=lease.resume, token="")

    def claim(self, mine: Holder) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            fh.write(mine.dump())
        return True

    def remove_stale(self, holder: Holder, token: str) -> bool:
        """Move the stale file aside; True when what was moved is ``holder`` (else put it back)."""
        aside = self.path.with_name(f"{self.path.name}.stale-{token}")
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

    def write(self, mine: Holder) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{mine.token}.tmp")
        tmp.write_text(mine.dump())
        os.replace(tmp, self.path)

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class TagMedium:
    """The study's MLflow experiment tag ``harness.driver`` (module docstring)."""

    place = " in the tracking store"
    tail = ""

    def __init__(self, client: Any, experiment_id: str, *, experiment: str, where: str, settle_s: float) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.experiment = experiment
        self.where = where  # the tracking URI, for messages
        self.settle_s = settle_s
        self.name = f"tag {TAG_DRIVER} of MLflow experiment {experiment!r} at {where}"
        self.note = f" (from any working directory: the lease is {self.name})"

    def read(self, lease: Lease | None = None) -> Holder | None:
        text = self.client.get_experiment(self.experiment_id).tags.get(TAG_DRIVER)
        if not text:
            return None
        try:
            return Holder.parse(text)
        except (ValueError, KeyError, TypeError):
            return None  # not a holder record: nothing to respect

    def claim(self, mine: Holder) -> bool:
        t0 = time.monotonic()
        try:
            self.write(mine)
        except Exception as exc:  # noqa: BLE001 -- MLflow's error for a tag another driver just created
            holder = self.read()
            if holder is not None and holder.token != mine.token:
                return False
            raise HarnessError(f"study {mine.study!r}: could not write the lease on MLflow experiment "
                               f"{self.experiment!r} at {self.where}: {_first_line(exc)[:200]}") from None
        time.sleep(max(self.settle_s, 3 * (time.monotonic() - t0)))
        holder = self.read()
        if holder is None:
            raise LeaseHeld(f"study {mine.study!r}: another driver took the study in the tracking store "
                            f"{self.where} at the same time; run one `harness run` per study")
        # Another driver wrote after us: it holds the study (it finds its own token).
        return holder.token == mine.token

    def remove_stale(self, holder: Holder, token: str) -> bool:
        return True  # the claim writes over it

    def write(self, mine: Holder) -> None:
        self.client.set_experiment_tag(self.experiment_id, TAG_DRIVER, mine.dump())

    def delete(self) -> None:
        self.client.delete_experiment_tag(self.experiment_id, TAG_DRIVER)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
