"""The reaper of a driver's local Ray: no Ray process outlives the driver that started it.

A driver killed with SIGKILL runs no exit handler, and some of Ray's processes (the dashboard and
runtime-env agents) do not notice that the driver and raylet are gone. So before the driver starts
its local Ray (harness.driver._orchestrate.init_ray) it puts a random token into its environment
(``OWNER_ENV``), which Ray's processes inherit, and starts this module as a small process in a
session of its own (Ctrl-C or a kill of the driver's process group does not reach it). The reaper
notes the driver's descendants (every ``POLL_S`` seconds for ``SETTLE_S``, then every
``SLOW_POLL_S``: the agents overwrite their environment when they set their process title, so the
token alone does not find them) until its parent, the driver, is gone, however it ended. Then it
ends every process of this user whose environment holds the token, every noted descendant still
running (the same process: its start time is checked, so a reused pid is never hit) and their
children: SIGTERM, then SIGKILL to what is still there after ``GRACE_S``. Other Rays, and the Ray
of a live driver, are neither marked nor descendants of the dead driver, so they are never touched.
A driver that exits normally has stopped its Ray already; the reaper then finds nothing and exits.
`harness ui` starts one too, for its MLflow server (harness.cli.study.run_forwarding_signals).

Imports only the standard library and psutil (it runs for the whole study beside the driver).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from typing import Any

OWNER_ENV = "HARNESS_RAY_OWNER"
POLL_S = 0.5
SETTLE_S = 120.0  # after this, the descendants are noted every SLOW_POLL_S only
SLOW_POLL_S = 10.0
GRACE_S = 3.0

_REAPERS: list[subprocess.Popen[bytes]] = []  # kept so the running reaper is never garbage


def start_reaper() -> str:
    """Mark this process's environment (so the local Ray about to start inherits the mark) and start
    the reaper that ends the marked processes once this process is gone. Returns the token."""
    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    os.environ[OWNER_ENV] = token
    _REAPERS.append(subprocess.Popen([sys.executable, "-m", __name__, token], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True))
    return token


def marked(token: str) -> list:
    """The live processes (other than this one) whose environment holds ``OWNER_ENV=token``."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(OWNER_ENV) == token:
                found.append(proc)
        except (psutil.Error, OSError):  # gone, another user's, or a kernel thread
            continue
    return found


def reap(token: str, known: dict[int, Any] | None = None, grace_s: float = GRACE_S) -> int:
    """End the processes marked with ``token``, the ``known`` descendants of the driver (pid ->
    psutil.Process) still running and their children; returns how many there were."""
    import psutil

    procs = {p.pid: p for p in marked(token)}
    for proc in list((known or {}).values()):
        try:
            if proc.is_running():  # the same process (its start time is checked), not a reused pid
                procs.setdefault(proc.pid, proc)
                procs.update((c.pid, c) for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    procs.pop(os.getpid(), None)
    for proc in procs.values():
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(list(procs.values()), timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)


def main(argv: list[str]) -> int:
    import psutil

    token = argv[0]
    driver_pid = os.getppid()
    known: dict[int, Any] = {}
    start = last = time.monotonic()
    try:
        driver = psutil.Process(driver_pid)
        while os.getppid() == driver_pid:  # reparented once the driver has exited
            now = time.monotonic()
            # Ray's long-lived processes start with it: look often at first, then seldom (a look
            # reads the status of every process on the machine, a cost that grows with their number).
            if now - last >= (POLL_S if now - start < SETTLE_S else SLOW_POLL_S) or last == start:
                last = now
                try:
                    for child in driver.children(recursive=True):
                        if child.pid != os.getpid():
                            known[child.pid] = child
                except psutil.Error:
                    pass
            time.sleep(POLL_S)
    except psutil.Error:  # the driver was gone before this started
        pass
    reap(token, known)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
