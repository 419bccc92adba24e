"""Forked sampling workers die with the process that forked them (a SIGKILLed build leaves none)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

# The parent forks a worker that calls the sampler's start-up (negatives._set_job) and then waits
# for work forever, as an idle pool worker does; the parent prints the worker's pid and sleeps.
PARENT = """
import multiprocessing, os, sys, time
from harness.data import negatives as neg

def worker(parent):
    neg._set_job(parent, "response", None, None, 9, 1000)
    time.sleep(600)

ctx = multiprocessing.get_context("fork")
child = ctx.Process(target=worker, args=(os.getpid(),))
child.start()
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_forked_worker_dies_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        time.sleep(0.5)  # the worker has made its request
        assert _alive(worker)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        while _alive(worker) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), "the worker outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()
