"""The cyclic garbage collector around heaps that live until the process ends.

Every harness process holds the modules of torch, transformers, Ray and MLflow, and a study driver
also its prepared data: half a million objects or more that are never garbage. Python's full
collection walks all of them each time it runs, several times in a study's driver, and again while
the interpreter exits (measured in benchmarks/results/driver_exit.md).

- ``frozen()``: for a block, what exists at its start sits in the permanent generation, where no
  collection walks it; unfrozen after, so nothing is kept past the block.
- ``paused()``: no cyclic collection during a block that allocates what stays (imports, building a
  model); the collector runs again after it.
- ``then_exit(main)``: a console entry point's ``main``, then the heap frozen, so that the
  interpreter's last collections skip what the process is about to drop anyway.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def then_exit(main: Callable[[], int]) -> int:
    code = main()
    gc.freeze()
    return code
