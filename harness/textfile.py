"""The text of a file a user gives (a study file, a config file, a results CSV): UTF-8, a byte-order
mark dropped, and every way it can fail one error naming the file (and the line of the first byte
that is not UTF-8)."""

from __future__ import annotations

from pathlib import Path

from harness.errors import DataError, HarnessError


def read_utf8(path: Path, what: str, error: type[HarnessError] = DataError) -> str:
    """The UTF-8 text of the existing file ``path`` (``what`` names it in messages) without a
    byte-order mark (spreadsheet programs write one); ``error`` is raised where the bytes are not
    UTF-8, ``DataError`` where the file cannot be read."""
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
