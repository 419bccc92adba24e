"""`--output /dev/stdout` (or /dev/fd/N, or a link to either) writes into the descriptor the shell
opened, as it is open: `>> log` appends to the log and `| reader` gets the text. The output path
was resolved through its links first, so the log a shell appended to was replaced by the table,
and a pipe (a link to "pipe:[N]") failed "No such file or directory"."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]


@contextlib.contextmanager
def stdout_to(fd: int) -> Iterator[None]:
    """The process's descriptor 1 is ``fd`` for the block, as a shell's redirection makes it."""
    saved = os.dup(1)
    os.dup2(fd, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "results.csv"
    write_long_csv(path, synthetic_records())
    return path


def _table(run_cli: Cli, results: Path) -> str:
    rc, out, err = run_cli("table", "--from", str(results))
    assert rc == 0 and out, err
    return out


@pytest.mark.parametrize("output", ["/dev/stdout", "/dev/fd/1", "link"])
def test_output_to_stdout_appends_where_the_shell_appends(output: str, results: Path, tmp_path: Path,
                                                          run_cli: Cli) -> None:
    """`harness table --output /dev/stdout >> log`: the log keeps what it held."""
    table = _table(run_cli, results)
    if output == "link":
        (tmp_path / "out.md").symlink_to("/dev/stdout")
        output = str(tmp_path / "out.md")
    log = tmp_path / "log.txt"
    log.write_text("PREV\n")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        with stdout_to(fd):
            rc, _, err = run_cli("table", "--from", str(results), "--output", output)
    finally:
        os.close(fd)
    assert rc == 0, err
    assert log.read_text() == "PREV\n" + table
    assert (tmp_path / "out.md").is_symlink() or not (tmp_path / "out.md").exists()  # the link stays one


def test_output_to_stdout_goes_down_a_pipe(results: Path, run_cli: Cli) -> None:
    """`harness table --output /dev/stdout | head`: the reader gets the table."""
    table = _table(run_cli, results)
    read, write = os.pipe()
    try:
        with stdout_to(write):
            rc, _, err = run_cli("table", "--from", str(results), "--output", "/dev/stdout")
        os.close(write)
        write = -1
        with os.fdopen(read, "rb") as fh:
            read = -1
            got = fh.read().decode()
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
    assert rc == 0, err
    assert got == table


def test_another_descriptor_is_written_as_it_is_open(results: Path, tmp_path: Path, run_cli: Cli) -> None:
    """`3>> log harness table --output /dev/fd/3`: descriptor 3, appended to, stdout untouched."""
    table = _table(run_cli, results)
    log = tmp_path / "log.txt"
    log.write_text("PREV\n")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        rc, out, err = run_cli("table", "--from", str(results), "--output", f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    assert rc == 0 and out == "", err
    assert log.read_text() == "PREV\n" + table
