"""Where a study's trial state lives and how much space it takes.

Ray Tune keeps every trial's checkpoints and its result.json (every reported result), and the
outcome checkpoint holds the per-query test values and run files, under
``<storage_path>/<study>-<phase>/`` (a local path or s3://);
the early-stopping state sits there too. ``report_storage`` prints the location and the size at the
study's end and records them on the study run (tag harness.storage_path, metric storage_bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError
from harness.tracking import conventions as C

# Early stopping's state beside Tune's in a phase folder (harness.driver._early_stop_ray): plain JSON.
EARLY_STOP_STATE = "early_stopping.json"


def phase_dirs(spec: Any) -> list[str]:
    return [spec.phase_dir(p) for p in spec.phases]


def _filesystem(uri: str) -> tuple[Any, str]:
    """pyarrow's filesystem of ``uri`` (a local path or a URI such as s3://bucket/prefix) and the
    path in it. A local path goes to the local filesystem as a path, never pasted into a
    ``file://`` URI: a space, ``%``, ``<`` or a non-ASCII letter in it is no URI syntax."""
    import pyarrow.fs as pafs

    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    try:
        return pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise HarnessError(f"storage_path {uri}: {str(exc).splitlines()[0]}") from None


def exists(uri: str) -> bool:
    """Whether anything is at ``uri``."""
    import pyarrow.fs as pafs

    fs, path = _filesystem(uri)
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def file_names(uri: str) -> list[str]:
    """The names of the files directly under the directory at ``uri`` (none where it is absent)."""
    import pyarrow.fs as pafs

    fs, path = _filesystem(uri)
    return [info.base_name for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            if info.type == pafs.FileType.File]


def remove(uri: str) -> None:
    """Delete the directory at ``uri`` and everything under it, if it is there."""
    import pyarrow.fs as pafs

    fs, path = _filesystem(uri)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def read_text(uri: str) -> str | None:
    """The text of the file at ``uri``; None where there is none."""
    import pyarrow.fs as pafs

    fs, path = _filesystem(uri)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as fh:
        return str(fh.read().decode())


def write_text(uri: str, text: str) -> None:
    """Write ``text`` to the file at ``uri`` whole: into a temporary file beside it, then moved."""
    fs, path = _filesystem(uri)
    fs.create_dir(path.rpartition("/")[0], recursive=True)
    tmp = f"{path}.tmp"
    with fs.open_output_stream(tmp) as fh:
        fh.write(text.encode())
    fs.move(tmp, path)


def usage(uri: str) -> tuple[int, int]:
    """(bytes, files) under ``uri``; (0, 0) where nothing is."""
    import pyarrow.fs as pafs

    fs, path = _filesystem(uri)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return 0, 0
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    files = [i for i in infos if i.type == pafs.FileType.File]
    return sum(i.size or 0 for i in files), len(files)


def report_storage(spec: Any, store: Any, study_run: str, log: Callable[[str], None]) -> dict[str, Any]:
    # The phases that ran (a seed schedule's later rounds run only while a comparison is open).
    dirs = [d for d in phase_dirs(spec) if exists(d)] or phase_dirs(spec)
    sizes = [usage(d) for d in dirs]
    total = sum(b for b, _ in sizes)
    files = sum(n for _, n in sizes)
    store.set_tags(study_run, {C.TAG_STORAGE: ", ".join(dirs)})
    store.log_metrics(study_run, {C.METRIC_STORAGE_BYTES: float(total)})
    log(f"storage: trial checkpoints and results (per-query values in each trial's outcome checkpoint) under "
        f"{', '.join(dirs)}: {total / 2**20:.1f} MiB in {files} files")
    return {"dirs": dirs, "bytes": total, "files": files}
