"""Shared by the study tests: a real local Ray (2 CPUs) with a private data cache."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def local_ray(root: Path, **init: object) -> Iterator[Path]:
    """Ray on this machine and HARNESS_CACHE under ``root`` for the duration; both restored after."""
    import ray

    old = os.environ.get("HARNESS_CACHE")
    os.environ["HARNESS_CACHE"] = str(root / "cache")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, **init)
    try:
        yield root
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("HARNESS_CACHE", None)
        else:
            os.environ["HARNESS_CACHE"] = old
