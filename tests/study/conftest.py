"""Shared by the study tests: a real local Ray (2 CPUs) and one data cache for the session."""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@functools.cache
def shared_cache() -> str:
    """The data cache of this test session (removed at exit; tests/conftest.py makes it the
    session's HARNESS_CACHE). Entries are keyed by the data set's fingerprint, so studies of the
    same set load what the first one built instead of each building it again; the tests of the
    cache itself use caches of their own."""
    path = tempfile.mkdtemp(prefix="harness-test-cache-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


_SESSION_RAY: dict[str, bool] = {"running": False}


@contextlib.contextmanager
def local_ray(root: Path, own: bool = False) -> Iterator[Path]:
    """Ray on this machine (2 CPUs, and one logical GPU so that fractional-GPU trials can be packed)
    for the duration. One Ray serves every study of the session, as one cluster serves a user's
    studies: it starts on first use and stays up (``stop_session_ray`` stops it; tests/conftest.py
    calls it when the session ends), so each study does not pay Ray's start and stop. ``own``: a
    Ray of this block's own, stopped after it, for a study whose workers must see environment
    variables set just before (Ray's worker processes inherit the environment of ``ray.init``)."""
    import ray

    if own:
        stop_session_ray()
        _init()
        try:
            yield root
        finally:
            ray.shutdown()
        return
    if not (_SESSION_RAY["running"] and ray.is_initialized()):
        _init()
        _SESSION_RAY["running"] = True
    yield root


def _init() -> None:
    import ray

    if ray.is_initialized():  # a Ray that other code in this process left running
        ray.shutdown()
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)


def stop_session_ray() -> None:
    import ray

    if _SESSION_RAY["running"]:
        _SESSION_RAY["running"] = False
        ray.shutdown()
