"""The one entry point to data: ``load_splits(cfg, train_sampler=...)`` for every ``data.source``.

- chitchat: the embedded set (``harness.data._chitchat``) from ``data.path`` or the packaged
  dataset.json, through the on-disk cache (``harness.data.cache``): built once per fingerprint,
  then loaded in seconds. Dev and test always hold the candidates of ``data.protocol``; a
  ``train_sampler`` (``train.sampler``) other than ``dataset`` replaces the train split's
  negatives only, built for the train queries alone and cached on its own, so the evaluation set
  is built once whatever the training negatives.
- msdialog / trec: the readers of ``harness.data._readers`` over the directory ``data.path``; their
  files bring their own candidates, so ``train_sampler`` must be ``dataset``.
- irds: an ir_datasets data set (``harness.data._irds``), its first-stage run the candidates, so
  ``train_sampler`` must be ``dataset`` too.

Which loader a source has, and what it needs, is its entry in ``harness.data.sources.SOURCES``.

Before anything trains on them, the splits are checked: an empty split is refused (one line
naming the data), and a dev or test split whose candidates are all non-relevant, or all
relevant, is warned about on stderr (every ranking then scores the same: 0, or 1).

``data.max_{train,dev,test}_queries`` then keep a seeded subset of each split (in original order;
a training sampler keeps the same train queries). A capped result gets its own fingerprint, sha256
of the uncapped one and the caps, so a fingerprint always names exactly the queries it stands for;
``Splits.evaluation`` changes with a dev or test cap and with nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from harness.data._progress import Progress
from harness.data._splits import SPLIT_NAMES, cap_queries
from harness.data.config import DataConfig
from harness.errors import DataError
from harness.records import Splits

_CAP_KEYS = {name: f"max_{name}_queries" for name in SPLIT_NAMES}


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


def load_splits(cfg: DataConfig, *, train_sampler: str = "dataset",
                progress: Progress | None = None) -> Splits:
    """Train/dev/test queries for ``cfg``, the train split's negatives by ``train_sampler``
    (``train.sampler``; see the module docstring); ``progress`` receives human-readable status
    lines (a few per build, never one per query)."""
    from harness.data.sources import SOURCES, check

    check(cfg, train_sampler)  # as TrialConfig does: this is also called with a bare DataConfig
    splits = apply_caps(SOURCES.get(cfg.source)(cfg, train_sampler, progress), cfg)
    check_splits(splits, cfg)
    return splits


@contextmanager
def sharing_corpora() -> Iterator[None]:
    """Within it, builds of several data variants (one per training sampler) read and index each
    source corpus once (the embedded chitchat set: ``harness.data._chitchat.sharing_corpora``)."""
    from harness.data._chitchat import sharing_corpora as chitchat

    with chitchat():
        yield


def _data_name(cfg: DataConfig) -> str:
    if cfg.path:
        return f"data.path {cfg.path}"
    return f"data.irds_id {cfg.irds_id}" if cfg.irds_id else f"data.source {cfg.source}"


def check_splits(splits: Splits, cfg: DataConfig) -> None:
    """Refuse an empty split; warn (one line on stderr) of a dev or test split on which every
    ranking scores the same (module docstring). A reader names the file where it knows it."""
    for name in SPLIT_NAMES:
        if not splits.split(name):
            raise DataError(f"{_data_name(cfg)}: the {name} split has no queries; every split needs "
                            "at least one")
    for name in ("dev", "test"):
        labels = {c.label > 0 for q in splits.split(name) for c in q.candidates}
        if labels == {False}:
            warn(f"{_data_name(cfg)}: the {name} split has no relevant document: every metric on it is 0")
        elif labels == {True}:
            warn(f"{_data_name(cfg)}: every candidate of the {name} split is relevant: every metric "
                 "on it is 1, whatever the ranking")


def warn(message: str) -> None:
    """A warning the user must see whoever loads the data (``progress`` may be silent): one line
    on stderr."""
    print(f"harness: warning: {message}", file=sys.stderr, flush=True)
