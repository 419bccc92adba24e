"""Seeded, deterministic choices over a data set: which conversations, which split, which queries.

Every choice draws from its own ``numpy.random.Generator`` seeded with ``(split_seed, purpose)``
(never ``hash(str)``, which changes per process), so a subset, a split and a query cap do not
shift each other and the same seed gives the same data in every process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError
from harness.records import Query

# Stream tags: one independent random stream per purpose.
_SUBSET, _SPLIT, _CAP = 1, 2, 3
SPLIT_NAMES = ("train", "dev", "test")


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, *stream])


@dataclass(frozen=True, kw_only=True)
class GroupSplit:
    """Group indices (e.g. conversations) per split, each sorted ascending."""

    train: tuple[int, ...]
    dev: tuple[int, ...]
    test: tuple[int, ...]


def choose_subset(groups: Sequence[int], size: int | None, *, seed: int, key: str) -> tuple[int, ...]:
    """A seeded subset of ``size`` of ``groups`` (all when None), sorted ascending.

    ``key`` names the config key for the error when ``size`` exceeds what there is.
    """
    pool = sorted(groups)
    if size is None:
        return tuple(pool)
    if size > len(pool):
        raise ConfigError(f"{key} must be <= {len(pool)} (the available conversations), got {size}")
    chosen = _rng(seed, _SUBSET).choice(len(pool), size=size, replace=False)
    return tuple(sorted(pool[i] for i in chosen))


def split_groups(groups: Sequence[int], *, dev_fraction: float, test_fraction: float,
                 seed: int) -> GroupSplit:
    """Split ``groups`` into train/dev/test by a seeded permutation.

    dev and test get ``round(n * fraction)`` groups, at least one each; train gets the rest,
    which must be at least one. Splitting by group keeps every query of a conversation in one
    split, so no context leaks across splits.

    >>> s = split_groups(range(10), dev_fraction=0.1, test_fraction=0.2, seed=0)
    >>> (len(s.train), len(s.dev), len(s.test))
    (7, 1, 2)
    """
    pool = sorted(groups)
    n = len(pool)
    n_dev = max(1, round(n * dev_fraction))
    n_test = max(1, round(n * test_fraction))
    if n - n_dev - n_test < 1:
        raise ConfigError(f"data.conversations: {n} conversation(s) cannot fill train, dev "
                          f"({n_dev}) and test ({n_test}); use more conversations")
    order = [pool[i] for i in _rng(seed, _SPLIT).permutation(n)]
    return GroupSplit(train=tuple(sorted(order[n_dev + n_test:])),
                      dev=tuple(sorted(order[n_test:n_test + n_dev])),
                      test=tuple(sorted(order[:n_test])))


def cap_queries(queries: tuple[Query, ...], cap: int | None, *, seed: int,
                split: str) -> tuple[Query, ...]:
    """A seeded subset of at most ``cap`` queries of a split, in their original order."""
    if cap is None or cap >= len(queries):
        return queries
    chosen = _rng(seed, _CAP, SPLIT_NAMES.index(split)).choice(len(queries), size=cap, replace=False)
    return tuple(queries[i] for i in sorted(chosen))
