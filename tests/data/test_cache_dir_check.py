"""A cache folder that cannot be written is refused before anything is built: `harness data build
--cache-dir /etc/passwd` (or HARNESS_CACHE naming a file) built for about 100 s and then said "the
data was built but not cached"; --cache-dir /proc/nope was still building after 2 minutes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cachedir import cache_problem
from harness.cli import main

WAY_OUT = "the cache needs a folder this process can write"


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    start = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - start < 2  # refused up front, not after a build
    out, err = capsys.readouterr()
    assert out == "" and "harness data:" not in err  # no progress line: nothing was read or built
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_file_as_cache_dir_is_refused_before_building(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    assert _refused(["data", "build", "--cache-dir", str(afile)], capsys) == (
        f"harness: error: --cache-dir {afile}: {afile} is a file, not a directory; {WAY_OUT}")
    assert _refused(["data", "build", "--cache-dir", str(afile / "sub")], capsys) == (
        f"harness: error: --cache-dir {afile / 'sub'}: {afile} is a file, not a directory; {WAY_OUT}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and afile.read_text() == ""


def test_harness_cache_naming_a_file_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("HARNESS_CACHE", str(afile))
    assert _refused(["data", "build", "--conversations", "5"], capsys) == (
        f"harness: error: HARNESS_CACHE={afile}: {afile} is a file, not a directory; {WAY_OUT}")


def test_the_command_line_refuses_within_seconds(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    env = {**os.environ, "HARNESS_CACHE": str(afile)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "data", "build"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 2 and time.monotonic() - start < 30
    assert proc.stdout == "" and proc.stderr.splitlines() == [
        f"harness: error: HARNESS_CACHE={afile}: {afile} is a file, not a directory; {WAY_OUT}"]


def test_a_folder_that_can_be_made_passes_and_nothing_is_left(tmp_path: Path) -> None:
    assert cache_problem(tmp_path / "new" / "cache") is None
    (tmp_path / "made").mkdir()
    assert cache_problem(tmp_path / "made") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["made"] and not any((tmp_path / "made").iterdir())


def test_the_default_folder_is_named_as_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "home").write_text("")  # a HOME that is a file: ~/.cache/harness cannot be made
    monkeypatch.delenv("HARNESS_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_problem(None) == (f"the cache folder {tmp_path / 'home' / '.cache' / 'harness'} (the default; "
                                   f"HARNESS_CACHE names another): {tmp_path / 'home'} is a file, not a directory; "
                                   f"{WAY_OUT}")


def test_a_cache_folder_that_is_there_already_is_read_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data folder already there (a shared cache mounted read-only, which this suite, run as root,
    cannot make) is not refused: what it holds is read, and a build it cannot keep is said at its
    end. Only a folder that is not there and cannot be made is refused up front."""
    import harness.textfile

    monkeypatch.setattr(harness.textfile, "unwritable_dir", lambda path: "read-only file system")
    assert cache_problem(tmp_path / "shared") is not None  # not there, and cannot be made
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert cache_problem(tmp_path / "shared") is None


def test_a_cache_folder_the_user_may_not_enter_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a folder this user may not enter, Path.is_dir() raises PermissionError (only a missing
    path reads as False): it was a bare OSError line, exit 1, not naming the option. (Root enters
    every folder, so the refusal of the filesystem is made here.)"""
    real = Path.is_dir

    def locked(self: Path) -> bool:
        if "locked" in self.parts:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_dir", locked)
    problem = cache_problem(tmp_path / "locked" / "cache")
    assert problem is not None and problem.startswith(f"data.cache_dir {tmp_path / 'locked' / 'cache'}: Permission denied")
