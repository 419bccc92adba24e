"""The one entry point to data: ``load_splits(cfg)`` for every ``data.source``.

- chitchat: the embedded set (``harness.data.chitchat``) from ``data.path`` or the packaged
  dataset.json, through the on-disk cache (``harness.data.cache``): built once per fingerprint,
  then loaded in seconds.
- msdialog / trec: the readers of ``harness.data.readers`` over the directory ``data.path``.

``data.max_{train,dev,test}_queries`` then keep a seeded subset of each split (in original order).
A capped result gets its own fingerprint, sha256 of the uncapped one and the caps, so a
fingerprint always names exactly the queries it stands for.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

from harness.config import DataConfig
from harness.data import cache
from harness.data.progress import Progress
from harness.data.records import Splits
from harness.data.splits import SPLIT_NAMES, cap_queries
from harness.errors import DataError

_CAP_KEYS = {name: f"max_{name}_queries" for name in SPLIT_NAMES}


def chitchat_source(cfg: DataConfig) -> Path:
    """The chitchat-format file the embedded set is built from (absolute)."""
    from harness.data.chitchat import default_path

    path = Path(cfg.path).expanduser().resolve() if cfg.path else default_path()
    if not path.is_file():
        raise DataError(f"{path}: no such file (data.path of the chitchat data set)")
    return path


def chitchat_fingerprint(cfg: DataConfig, source: Path | None = None) -> str:
    """The cache key of the embedded set for ``cfg`` (hashes the source file: ~0.1 s)."""
    digest = cache.file_digest(source or chitchat_source(cfg))
    return cache.fingerprint(cache.build_fields(cfg), [digest])


def apply_caps(splits: Splits, cfg: DataConfig) -> Splits:
    """Seeded subsets per ``data.max_*_queries`` (see the module docstring)."""
    caps = {name: getattr(cfg, key) for name, key in _CAP_KEYS.items()}
    capped = {name: cap_queries(splits.split(name), caps[name], seed=cfg.split_seed, split=name)
              for name in SPLIT_NAMES}
    if all(capped[n] is splits.split(n) for n in SPLIT_NAMES):
        return splits
    blob = json.dumps({"base": splits.fingerprint, "caps": caps, "seed": cfg.split_seed},
                      sort_keys=True)
    return dataclasses.replace(splits, **capped, fingerprint=hashlib.sha256(blob.encode()).hexdigest())


def _chitchat(cfg: DataConfig, progress: Progress | None) -> Splits:
    from harness.data.chitchat import build_splits

    path = chitchat_source(cfg)
    fp = chitchat_fingerprint(cfg, path)
    target = cache.cache_file(cfg, fp)
    started = time.monotonic()
    splits = cache.load(target, fp, progress)
    if splits is not None:
        if progress:
            progress(f"loaded {target} in {time.monotonic() - started:.1f}s")
        return splits
    splits = build_splits(cfg, path=path, fingerprint=fp, progress=progress)
    if cache.store(target, splits, progress) and progress:
        progress(f"built in {time.monotonic() - started:.0f}s; cached at {target}")
    return splits


def load_splits(cfg: DataConfig, *, progress: Progress | None = None) -> Splits:
    """Train/dev/test queries for ``cfg`` (see the module docstring); ``progress`` receives
    human-readable status lines (a few per build, never one per query)."""
    if cfg.source == "chitchat":
        splits = _chitchat(cfg, progress)
    else:
        from harness.data.readers import read_msdialog, read_trec

        if not cfg.path:  # DataConfig refuses this too; kept for configs built around it
            raise DataError(f"data.path must be set for data.source={cfg.source}")
        reader = read_msdialog if cfg.source == "msdialog" else read_trec
        if progress:
            progress(f"reading {cfg.source} data from {cfg.path}")
        splits = reader(Path(cfg.path).expanduser().resolve())
    return apply_caps(splits, cfg)
