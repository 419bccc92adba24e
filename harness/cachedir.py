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
