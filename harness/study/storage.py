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

from harness.tracking import conventions as C


def phase_dirs(spec: Any) -> list[str]:
    return [spec.phase_dir(p) for p in spec.phases]


def as_uri(path: str) -> str:
    """A local path as a file:// URI (pyarrow's filesystems read both kinds through one call)."""
    return path if "://" in path else f"file://{path}"


def exists(uri: str) -> bool:
    """Whether anything is at ``uri`` (a local path or a URI such as s3://bucket/prefix)."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(as_uri(uri))
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def remove(uri: str) -> None:
    """Delete the directory at ``uri`` and everything under it, if it is there."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(as_uri(uri))
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def usage(uri: str) -> tuple[int, int]:
    """(bytes, files) under ``uri``; (0, 0) where nothing is."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(as_uri(uri))
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return 0, 0
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    files = [i for i in infos if i.type == pafs.FileType.File]
    return sum(i.size or 0 for i in files), len(files)


def report_storage(spec: Any, store: Any, study_run: str, log: Callable[[str], None]) -> dict[str, Any]:
    dirs = phase_dirs(spec)
    sizes = [usage(d) for d in dirs]
    total = sum(b for b, _ in sizes)
    files = sum(n for _, n in sizes)
    store.set_tags(study_run, {C.TAG_STORAGE: ", ".join(dirs)})
    store.log_metrics(study_run, {C.METRIC_STORAGE_BYTES: float(total)})
    log(f"storage: trial checkpoints and results (per-query values in each trial's outcome checkpoint) under "
        f"{', '.join(dirs)}: {total / 2**20:.1f} MiB in {files} files")
    return {"dirs": dirs, "bytes": total, "files": files}
