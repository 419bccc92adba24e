"""`harness validate` (and `harness run`, through validate_study) refuses a data cache it cannot
write: HARNESS_CACHE naming a file passed silently, and every trial of the study then built the
embedded data again."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main

QUICKSTART = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml"


def test_validate_refuses_harness_cache_naming_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("HARNESS_CACHE", str(afile))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(QUICKSTART), "--no-model"]) == 2
    out, err = capsys.readouterr()
    expected = (f"harness: error: HARNESS_CACHE={afile}: {afile} is a file, not a directory; the cache needs a "
                "folder this process can write (every trial would build the data again)")
    assert out == "" and err.strip().splitlines() == [expected]
