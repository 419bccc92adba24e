"""Shared by the study tests: a real local Ray (2 CPUs) and one data cache for the session."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
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


@contextlib.contextmanager
def local_ray(root: Path, **init: object) -> Iterator[Path]:
    """Ray on this machine and HARNESS_CACHE at ``shared_cache()`` for the duration; both restored
    after."""
    import ray

    old = os.environ.get("HARNESS_CACHE")
    os.environ["HARNESS_CACHE"] = shared_cache()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, **init)
    try:
        yield root
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("HARNESS_CACHE", None)
        else:
            os.environ["HARNESS_CACHE"] = old
