"""Where the harness keeps what it makes once and reuses: ``$HARNESS_CACHE``, else
``~/.cache/harness`` (docs/data.md). The data cache (harness.data.cache) and the empty MLflow store
template (harness.tracking.store) both live under it, so one variable moves every cache."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home(override: str | os.PathLike[str] | None = None) -> Path:
    """The absolute cache folder: ``override`` (a study's ``data.cache_dir``) where given, else
    ``$HARNESS_CACHE``, else ``~/.cache/harness``."""
    base = override or os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness"
    return Path(base).expanduser().resolve()


def cache_problem(override: str | os.PathLike[str] | None = None, *, option: str = "data.cache_dir",
                  folder: str = "data") -> str | None:
    """Why the cache's ``folder`` (``data/``: the built splits) under ``cache_home(override)``
    cannot be made and written, in one line that names where the folder was set (``option``, the
    name ``override`` was given under: ``--cache-dir``, ``data.cache_dir``; else ``HARNESS_CACHE``;
    else the default), or None when it can or is there already. Tried, not asked, and nothing is left behind
    (textfile.unwritable_dir). A build cannot tell in advance: it built for minutes and then only
    warned (or ``harness data build`` failed) that it could not cache the result."""
    from harness.textfile import unwritable_dir

    home = cache_home(override)
    try:
        there = (home / folder).is_dir()
    except OSError as exc:  # under a folder this user may not enter: is_dir() itself raises
        problem = exc.strerror or str(exc)
    else:
        if there:
            # There already (a shared cache mounted read-only, say): what it holds is read as
            # before, and a build it cannot keep is said when it ends.
            return None
        problem = unwritable_dir(home / folder)
    if problem is None:
        return None
    if override:
        named = f"{option} {override}"
    elif os.environ.get("HARNESS_CACHE"):
        named = f"HARNESS_CACHE={os.environ['HARNESS_CACHE']}"
    else:
        named = f"the cache folder {home} (the default; HARNESS_CACHE names another)"
    return f"{named}: {problem}; the cache needs a folder this process can write"
