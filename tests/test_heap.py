"""harness.heap: the cyclic collector skips the long-lived heap for a block, and for good at exit."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

from harness.heap import frozen, paused

REPO_STUDY = "search_spaces/quickstart.yaml"


class _Node:
    pass


def _cycle() -> weakref.ref:
    node = _Node()
    node.self = node  # only the cyclic collector can free it
    return weakref.ref(node)


@pytest.mark.slow
def test_frozen_hides_what_exists_from_collections_and_gives_it_back_after():
    gc.collect()
    ref = _cycle()
    with frozen():
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert ref() is not None  # frozen: no collection walks it
        young = _cycle()
        gc.collect()
        assert young() is None  # garbage made inside the block is collected as usual
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None  # unfrozen: nothing kept past the block


def test_paused_stops_collections_for_the_block_and_restores_the_state():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # was off before: stays off
    finally:
        gc.enable()


def test_the_console_entry_freezes_the_heap_after_the_command():
    code = ("import gc, sys; from harness.cli import entry; "
            f"sys.argv = ['harness', 'validate', {REPO_STUDY!r}, '--no-model']; rc = entry(); "
            "print(rc, gc.get_freeze_count() > 10000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.splitlines()[-1].split() == ["0", "True"], out.stderr[-2000:]
