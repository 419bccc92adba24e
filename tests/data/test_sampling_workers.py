"""Forked sampling workers die with the process that forked them (a SIGKILLed build leaves none)."""

from __future__ import annotations

import json
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
from harness.data import _negatives as neg

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


# In a process with an empty numba cache: prewarm starts the two background compilations, warm
# waits for them, then finds every kernel it calls in the cache they wrote and compiles nothing.
PREWARM = """
import json
from harness.data import _kernels as kernels
from harness.data import _negatives as negatives
negatives.prewarm()
started = len(negatives._COMPILING)
negatives.prewarm()  # already under way: nothing more is started
again = len(negatives._COMPILING)
negatives.warm()
stats = {k.py_func.__name__: (sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values()))
         for k in (kernels.score_row, kernels.score_row_sampled, kernels.score_docs, kernels.usable_hits,
                   kernels.moved, kernels.candidate_scores)}
negatives.prewarm()  # compiled in this process now: nothing to start
print(json.dumps({"started": started, "again": again, "after": len(negatives._COMPILING), "stats": stats}))
"""


@pytest.mark.slow
def test_kernels_compile_in_the_background_into_the_cache_that_warm_then_loads(tmp_path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run([sys.executable, "-c", PREWARM], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    report = json.loads(out.stdout)
    assert report["started"] == 2 and report["again"] == 2 and report["after"] == 0
    kernels = ("score_row", "score_row_sampled", "score_docs", "usable_hits", "moved", "candidate_scores")
    assert report["stats"] == {name: [1, 0] for name in kernels}  # one cache hit each, no miss
    # ... and with that cache in place, a new process has nothing to compile in the background.
    code = "from harness.data import _negatives as negatives; negatives.prewarm(); print(len(negatives._COMPILING))"
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           check=True, timeout=300)
    assert again.stdout.strip() == "0"
