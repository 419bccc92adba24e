"""Trainer checkpoints are read as plain data: what the harness writes loads, a pickled object
(which would run code as it loads) is refused in one line without running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness.errors import HarnessError
from harness.model.checkpoint import read_checkpoint


class _RunsCode:
    """Unpickling this calls ``os.system``: what a hostile checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch '{self.marker}'",)


def test_plain_data_loads(tmp_path: Path) -> None:
    state = {"step": 3, "model": {"w": torch.ones(2)}, "best_value": -float("inf"), "best_state": None,
             "curve": [(3, {"map": 0.5})], "config_id": "abc", "seed": 1, "betas": (0.9, 0.999)}
    torch.save(state, tmp_path / "trainer.pt")
    loaded = read_checkpoint(tmp_path / "trainer.pt")
    assert loaded["curve"] == [(3, {"map": 0.5})] and torch.equal(loaded["model"]["w"], torch.ones(2))


def test_an_object_that_would_run_code_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    torch.save({"step": 1, "payload": _RunsCode(marker)}, tmp_path / "trainer.pt")
    with pytest.raises(HarnessError, match=r"trainer.pt: refused: not a checkpoint of plain tensors") as exc:
        read_checkpoint(tmp_path / "trainer.pt")
    assert "\n" not in str(exc.value) and not marker.exists()


@pytest.mark.parametrize("content", [b"", b"not a checkpoint"])
def test_a_file_that_is_no_checkpoint_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "trainer.pt").write_bytes(content)
    with pytest.raises(HarnessError) as exc:
        read_checkpoint(tmp_path / "trainer.pt")
    assert str(exc.value).startswith(f"{tmp_path / 'trainer.pt'}: ") and "\n" not in str(exc.value)


def test_export_and_resume_read_through_it(tmp_path: Path) -> None:
    """`harness export` (its best-dev weights) and a resumed trainer refuse the same file."""
    from harness.model.export import _best_state

    marker = tmp_path / "ran"
    torch.save({"config_id": "abc", "seed": 1, "best_state": _RunsCode(marker)}, tmp_path / "trainer.pt")
    with pytest.raises(HarnessError, match="refused"):
        _best_state(tmp_path / "trainer.pt", "abc", 1)
    assert not marker.exists()
