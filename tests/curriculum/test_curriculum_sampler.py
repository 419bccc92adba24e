"""The pacing-aware sampler: resumable, uniform over all data with baseline pacing, and never
outside the available prefix with a curriculum."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from harness.curriculum.pacing import PACING
from harness.curriculum.sampler import PacedSampler, order_by_score
from harness.errors import ConfigError


def sampler(pacing: str = "root_n", *, N: int = 200, batch: int = 8, seed: int = 5,
            T: float = 100, delta: float = 0.33, n: float = 2.0) -> PacedSampler:
    order = np.random.default_rng(0).permutation(N)  # an arbitrary difficulty order
    return PacedSampler(order=order, pacing=pacing, delta=delta, T=T, n=n, batch_size=batch, seed=seed)


@pytest.mark.parametrize("pacing", PACING.names())
def test_resuming_at_step_k_gives_the_same_batches(pacing: str) -> None:
    full = [sampler(pacing).batch(s) for s in range(120)]
    resumed = sampler(pacing)  # a fresh object, as after a restart from a checkpoint at step 60
    for s in range(60, 120):
        assert np.array_equal(resumed.batch(s), full[s])
    assert np.array_equal(pickle.loads(pickle.dumps(resumed)).batch(7), full[7])


@pytest.mark.parametrize("pacing", PACING.names())
def test_no_batch_index_outside_the_available_prefix(pacing: str) -> None:
    s = sampler(pacing, delta=0.1)
    for step in range(0, 130, 3):
        batch = s.batch(step)
        allowed = set(s.order[: s.available(step)].tolist())
        assert len(batch) == 8 and len(set(batch.tolist())) == 8  # without replacement
        assert set(batch.tolist()) <= allowed


def test_curriculum_starts_on_the_easiest_fraction_only() -> None:
    s = sampler("linear", delta=0.1, N=200)
    easiest = set(s.order[:20].tolist())
    seen = set(np.concatenate([s.batch(0) for _ in range(3)]).tolist())
    assert s.available(0) == 20 and seen <= easiest
    assert s.available(100) == 200


def test_baseline_samples_uniformly_from_all_instances() -> None:
    s = sampler("baseline", N=50, batch=10)
    assert s.available(0) == 50
    counts = np.bincount(np.concatenate([s.batch(k) for k in range(2000)]), minlength=50)
    assert (counts > 0).all()  # every instance is drawn from the first step on
    expected = 2000 * 10 / 50
    assert np.abs(counts - expected).max() < 0.25 * expected


def test_seeds_and_steps_give_different_batches() -> None:
    a, b = sampler(seed=1), sampler(seed=2)
    assert not np.array_equal(a.batch(150), b.batch(150))
    assert not np.array_equal(a.batch(150), a.batch(151))


def test_fewer_instances_than_a_batch_gives_them_all() -> None:
    s = sampler("step", N=5, batch=8)
    assert sorted(s.batch(0).tolist()) == [0, 1, 2, 3, 4]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="curriculum.pacing"):
        sampler("cubic")
    with pytest.raises(ConfigError, match="curriculum.delta"):
        sampler(delta=0.0)
    with pytest.raises(ValueError):
        PacedSampler(order=np.array([], dtype=int), pacing="baseline", delta=0.3, T=10, n=1,
                     batch_size=2, seed=0)
    with pytest.raises(ValueError):
        sampler().batch(-1)


def test_order_by_score_direction_and_stable_ties() -> None:
    values = np.array([2.0, 1.0, 2.0, 3.0, 1.0])
    assert order_by_score(values, descending=False).tolist() == [1, 4, 0, 2, 3]
    assert order_by_score(values, descending=True).tolist() == [3, 0, 2, 1, 4]
    with pytest.raises(ValueError, match="finite"):
        order_by_score(np.array([1.0, np.nan]), descending=False)
