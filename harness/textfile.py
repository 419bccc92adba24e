"""Files in and out. In: the text of a file a user gives (a study file, a config file, a results
CSV): UTF-8, a byte-order mark dropped, and every way it can fail one error naming the file (and
the line of the first byte that is not UTF-8). Out: ``write_atomic``, the one way the harness
writes a file a user keeps (tables, plots, reports, exports): whole or not at all."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from harness.errors import DataError, HarnessError


def read_utf8(path: Path, what: str, error: type[HarnessError] = DataError) -> str:
    """The UTF-8 text of the existing file ``path`` (``what`` names it in messages) without a
    byte-order mark (spreadsheet programs write one); ``error`` is raised where the bytes are not
    UTF-8, ``DataError`` where the file cannot be read or is no regular file (a directory, a FIFO
    that would block the read, a device), said as what it is."""
    not_file = file_kind(path)
    if not_file:
        raise DataError(f"{path}: the {what} is {not_file}, not a file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise error(f"{path}:{line}: the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                    f"offset {exc.start}); save it as UTF-8") from None


def file_kind(path: Path) -> str:
    """What is at ``path`` when it is there but no regular file ("a directory", "a FIFO (named
    pipe)", "a device", "a socket", "a symlink loop"); "" for a regular file or nothing at all."""
    import errno
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return "a symlink loop" if exc.errno == errno.ELOOP else ""
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def write_atomic(path: Path | str, data: str | bytes, what: str = "file") -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all: into a temporary file in the
    same directory, flushed to disk (fsync), then moved over ``path`` (``os.replace``), so a full
    disk, a kill or a crash leaves the previous file intact, never a fragment. A device, FIFO or
    socket (a named pipe, ``/dev/null``) and a descriptor already open (``/dev/stdout``,
    ``/dev/fd/N``, ``/proc/self/fd/N``, or a link to one) are written in place, as they cannot be
    replaced: the descriptor itself, so a shell's ``>> log`` still appends and ``| head`` gets the
    text (the link's target replaced the log, and the pipe's was no file at all). Every failure
    is one ``DataError`` naming ``path`` and ``what`` it was to hold (a reader gone from a pipe:
    ``BrokenPipeError``, which the command line ends quietly); returns the path written.

    The new file gets the mode the previous one had (else the umask's ``0o666``)."""
    import stat
    import tempfile

    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data

    def fail(reason: str) -> DataError:
        return DataError(f"{target}: cannot write the {what}: {reason}")

    # Checked before any link is resolved: /dev/stdout resolves to the file a shell redirected it
    # to (which the rename below would replace) or to "pipe:[N]" (no file at all).
    descriptor = open_descriptor(target)
    try:
        if descriptor is None and target.is_symlink():
            target = target.resolve(strict=False)
        info = target.stat() if descriptor is not None or target.exists() else None
    except (OSError, RuntimeError) as exc:  # a symlink loop, a path through a file, a closed descriptor
        raise fail(getattr(exc, "strerror", None) or str(exc)) from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise fail("it is a directory; give a file name")
    # An output path that is a database (the MLflow store: `--to mlruns/mlflow.db`) replaced every
    # study in it with one table or page, exit 0.
    if info is not None and stat.S_ISREG(info.st_mode) and not payload.startswith(SQLITE_MAGIC):
        try:
            with open(target, "rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError:
            head = b""
        if head == SQLITE_MAGIC:
            raise fail("it is an SQLite database (an MLflow store?), which this would replace; give "
                       "another file")
    if descriptor is not None or (info is not None and not stat.S_ISREG(info.st_mode)):
        try:  # a device, a pipe or an open descriptor: nothing to replace
            _write_in_place(target, descriptor, payload)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise fail(exc.strerror or str(exc)) from None
        return target
    if info is not None and not (info.st_mode & 0o222 and os.access(target, os.W_OK)):
        raise fail("it is read-only")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"{exc.filename or target.parent}: {exc.strerror or exc}") from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~umask())
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise fail(exc.strerror or str(exc)) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    fsync_dir(target.parent)  # the rename itself on disk
    return target


# /dev/fd/N and /proc/<pid>/fd/N (a thread's too) once their folder is resolved; and the names of
# the standard streams, links to /proc/self/fd/0, 1 and 2 on Linux.
_FD_PATH = re.compile(r"/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd/(\d+)|/dev/fd/(\d+)")
_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
OTHER_PROCESS = -1  # ``open_descriptor``: a descriptor of another process, written through its path


def open_descriptor(path: Path | str) -> int | None:
    """The number of this process's open descriptor that ``path`` names (``/dev/stdout``,
    ``/dev/fd/N``, ``/proc/self/fd/N``, or a chain of links that passes through one), OTHER_PROCESS
    for another process's ``/proc/<pid>/fd/N``, None for every other path. Read from the names
    along the links, never from where they end: the last link of such a chain points at whatever the
    descriptor has open, a file (which is no place to write to by name) or ``pipe:[N]``."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        current = os.path.join(os.path.realpath(os.path.dirname(current)), os.path.basename(current))
        if current in _STREAMS:
            return _STREAMS[current]
        match = _FD_PATH.fullmatch(current)
        if match:
            owner = current.split("/")[2] if current.startswith("/proc/") else "self"
            mine = owner in ("self", "thread-self", str(os.getpid()))
            return int(match.group(1) or match.group(2)) if mine else OTHER_PROCESS
        try:
            link = os.readlink(current)
        except OSError:  # no link (a file, a folder, nothing): not a descriptor
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), link))
    return None


def _write_in_place(target: Path, descriptor: int | None, payload: bytes) -> None:
    """``payload`` into an open descriptor of this process as it is open (its offset, its append
    flag: a shell's ``>>`` keeps what the file held), after Python's own buffers of stdout and
    stderr (what was printed before comes first); anything else (a device, a FIFO, another
    process's descriptor) opened for appending, never truncated."""
    import sys

    if descriptor is None or descriptor == OTHER_PROCESS:
        with open(target, "ab") as fh:
            fh.write(payload)
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):  # replaced, or closed
            stream.flush()
    view = memoryview(payload)
    while view:
        view = view[os.write(descriptor, view):]


# A cell a spreadsheet program runs as a formula when it starts with one of these (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """``value`` as a CSV cell that a spreadsheet shows as text: a string starting like a formula
    (``=HYPERLINK(...)``, ``+1``, ``@SUM``) gets a leading ``'``; numbers, and strings that read as
    one (``-0.5``), stay as they are. So does every other string, except one that starts with ``'``
    and then like a formula (``'=x``), which gets one more ``'``: ``csv_text`` undoes exactly what
    this adds, so a name goes out and comes back the same.

    >>> csv_cell("=HYPERLINK(A1)"), csv_cell("-0.25"), csv_cell(-1.0), csv_cell("lr-3")
    ("'=HYPERLINK(A1)", '-0.25', -1.0, 'lr-3')
    >>> csv_cell("'=x"), csv_cell("'quoted")
    ("''=x", "'quoted")
    """
    return f"'{value}" if isinstance(value, str) and _formula_like(value) else value


def csv_text(cell: str) -> str:
    """The text a CSV cell written by ``csv_cell`` holds: its guarding ``'`` dropped where
    ``csv_cell`` would have added it (the cell is ``'`` and then text that starts like a formula),
    every other cell as it is.

    >>> csv_text("'=cmd()"), csv_text("''=x"), csv_text("'quoted"), csv_text("'-0.5"), csv_text("=x")
    ('=cmd()', "'=x", "'quoted", "'-0.5", '=x')
    """
    return cell[1:] if cell.startswith("'") and _formula_like(cell) else cell


def _formula_like(text: str) -> bool:
    """``text`` after any leading ``'`` starts like a formula and is no number: ``csv_cell`` guards
    it. Leading quotes are skipped so that guarding is one-to-one (``'=x`` is guarded too)."""
    core = text.lstrip("'")
    if not core.startswith(FORMULA_STARTS):
        return False
    try:
        float(core)
        return False
    except ValueError:
        return True


# A character a table cannot show: C0 and C1 controls and DEL (a line break among them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def unprintable(text: str) -> str | None:
    """What in ``text`` a one-line name in a table cannot hold, in words, else None: a line break, a
    NUL or another control character (tab, escape ...), which a table shows as nothing or as a space
    (two names that read alike) or passes to a terminal.

    >>> unprintable("lr 2e-5"), unprintable("a\\nb"), unprintable("a\\x1b[31m")
    (None, 'a line break', 'a control character (U+001B) at position 1')
    """
    if "\n" in text or "\r" in text:
        return "a line break"
    control = _CONTROL.search(text)
    if control is None:
        return None
    what = "a NUL character" if control[0] == "\0" else f"a control character (U+{ord(control[0]):04X})"
    return f"{what} at position {control.start()}"


def umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc/self/status):
    setting it to read it back races another thread's file creation."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(folder: Path) -> None:
    """A rename into ``folder`` on disk: its directory entry synced (best effort: not every file
    system allows it)."""
    with contextlib.suppress(OSError):
        dirfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


def unwritable_dir(path: Path) -> str | None:
    """Why no directory can be made and written at ``path``, or None when one can. Tried, not asked
    (``os.access`` answers yes to root on a read-only tree and knows nothing of ACLs): an empty
    probe directory is made in the nearest directory that exists and removed at once, so a check
    leaves nothing behind. A path the filesystem will not look into (a folder this user may not
    enter, a name too long) gives its reason too."""
    import tempfile

    try:
        if path.exists() and not path.is_dir():
            return "it is a file, not a directory"
        parent = path
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            return f"{parent} is a file, not a directory"
    except OSError as exc:  # Path.exists() is False only for a missing path; the others raise
        return exc.strerror or str(exc)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".harness-probe-", dir=parent))
    except OSError as exc:
        return f"{parent} is not writable ({exc.strerror or exc})"
    return None
