"""The one entry point to data: ``load_splits(cfg, train_sampler=...)`` for every ``data.source``.

- chitchat: the embedded set (``harness.data.chitchat``) from ``data.path`` or the packaged
  dataset.json, through the on-disk cache (``harness.data.cache``): built once per fingerprint,
  then loaded in seconds. Dev and test always hold the candidates of ``data.protocol``; a
  ``train_sampler`` (``train.sampler``) other than ``dataset`` replaces the train split's
  negatives only, built for the train queries alone and cached on its own, so the evaluation set
  is built once whatever the training negatives.
- msdialog / trec: the readers of ``harness.data.readers`` over the directory ``data.path``; their
  files bring their own candidates, so ``train_sampler`` must be ``dataset``.
- irds: an ir_datasets data set (``harness.data.irds``), its first-stage run the candidates, so
  ``train_sampler`` must be ``dataset`` too.

Which loader a source has, and what it needs, is its entry in ``harness.data.sources.SOURCES``.

``data.max_{train,dev,test}_queries`` then keep a seeded subset of each split (in original order;
a training sampler keeps the same train queries). A capped result gets its own fingerprint, sha256
of the uncapped one and the caps, so a fingerprint always names exactly the queries it stands for;
``Splits.evaluation`` changes with a dev or test cap and with nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config import DataConfig
from harness.data import cache
from harness.data.progress import Progress
from harness.data.records import Splits
from harness.data.splits import SPLIT_NAMES, cap_queries
from harness.errors import ConfigError, DataError

if TYPE_CHECKING:
    from harness.data.chitchat import Bm25, Corpus

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


def _cached(target: Path, fp: str, build: Callable[[], cache.Payload], what: str,
            progress: Progress | None) -> Splits:
    """The splits cached at ``target`` for ``fp``, else those of ``build()``'s payload, stored
    there (the splits are decoded from the payload, as a later load decodes the file)."""
    started = time.monotonic()
    splits = cache.load(target, fp, progress)
    if splits is not None:
        if progress:
            progress(f"loaded {what} from {target} in {time.monotonic() - started:.1f}s")
        return splits
    with cache.paused_gc():
        payload = build()
        stored = cache.store(target, payload, progress)
        splits = cache.decode(payload)
    if stored and progress:
        progress(f"built {what} in {time.monotonic() - started:.0f}s; cached at {target}")
    return splits


def load_chitchat(cfg: DataConfig, train_sampler: str, progress: Progress | None) -> Splits:
    """The embedded set (see the module docstring), through the cache."""
    from harness.data import chitchat

    method = chitchat.train_method(train_sampler, cfg.protocol)
    path = chitchat_source(cfg)
    fp = chitchat_fingerprint(cfg, path)
    shared: list[tuple[Corpus, Bm25]] = []  # read and indexed at most once for both builds

    def corpus() -> tuple[Corpus, Bm25]:
        if not shared:
            shared.append(chitchat.open_corpus(path, progress))
        return shared[0]

    def build_base() -> cache.Payload:
        c, bm25 = corpus()
        return chitchat.build_payload(cfg, path=path, fingerprint=fp, progress=progress, corpus=c,
                                      bm25=bm25)

    base = _cached(cache.cache_file(cfg, fp), fp, build_base,
                   f"the data set ({cfg.protocol} protocol)", progress)
    if method is None:
        return base
    tfp = cache.train_fingerprint(fp, method)

    def build_train() -> cache.Payload:
        c, bm25 = corpus()
        return chitchat.build_train_payload(cfg, method, path=path, fingerprint=tfp, progress=progress,
                                            corpus=c, bm25=bm25)

    train = _cached(cache.train_cache_file(cfg, fp, method), tfp, build_train,
                    f"the train split ({method} negatives, train.sampler={train_sampler})", progress)
    return Splits(train=train.train, dev=base.dev, test=base.test, fingerprint=tfp)


def load_splits(cfg: DataConfig, *, train_sampler: str = "dataset",
                progress: Progress | None = None) -> Splits:
    """Train/dev/test queries for ``cfg``, the train split's negatives by ``train_sampler``
    (``train.sampler``; see the module docstring); ``progress`` receives human-readable status
    lines (a few per build, never one per query)."""
    from harness.data.sources import get

    source = get(cfg.source)
    if source.own_candidates and train_sampler != "dataset":  # TrialConfig refuses this too
        raise ConfigError(f"train.sampler must be dataset for data.source={cfg.source} "
                          f"({source.why}), got {train_sampler!r}")
    if source.needs_path and not cfg.path:  # DataConfig refuses this too
        raise DataError(f"data.path must be set for data.source={cfg.source}")
    splits = source(cfg, train_sampler, progress)
    return apply_caps(splits, cfg)
