"""A configuration's seeds trained together (harness.training.fused.SeedGroup) equal its seeds
trained one by one with Trainer."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.training.fused import SeedGroup
from harness.training.loop import EvalRecord, FinalRecord, StepRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits

SEEDS = (1, 2, 3)
FLAT = {"train.steps": 12, "train.eval_every": 4, "train.batch_size": 8}


@pytest.fixture(scope="module")
def prepared():
    return prepare_data(toy_splits(n_train=48, n_dev=12, n_test=12), tiny_config().model)


def _separate(cfg, prepared):
    return list(Trainer(cfg, prepared, log_every=2).run())


def _grouped(cfgs, prepared, fused):
    group = SeedGroup(cfgs, prepared, fused=fused, log_every=2)
    out: list[list] = [[] for _ in cfgs]
    order = []
    for i, rec in group.run():
        out[i].append(rec)
        order.append(type(rec))
    return group, out, order


def test_interleaved_group_equals_separate_runs(prepared):
    cfgs = [tiny_config(**FLAT, **{"train.seed": s}) for s in SEEDS]
    group, out, order = _grouped(cfgs, prepared, fused=False)
    assert not group.fused
    # every final record after every other record
    assert order[-len(SEEDS):] == [FinalRecord] * len(SEEDS)
    assert FinalRecord not in order[:-len(SEEDS)]
    for cfg, recs in zip(cfgs, out, strict=True):
        sep = _separate(cfg, prepared)
        assert [type(r) for r in recs] == [type(r) for r in sep]
        for a, b in zip(recs, sep, strict=True):
            if isinstance(a, StepRecord):
                assert (a.step, a.loss, a.lr) == (b.step, b.loss, b.lr)
            elif isinstance(a, EvalRecord):
                assert a == b
            else:
                assert (a.per_query, a.dev, a.best_step, a.runs) == (b.per_query, b.dev, b.best_step, b.runs)


def test_group_of_other_configurations_is_refused(prepared):
    with pytest.raises(ConfigError, match="only in train.seed"):
        SeedGroup([tiny_config(), tiny_config(**{"train.seed": 2, "train.lr": 1e-4})], prepared)
    with pytest.raises(ConfigError, match="must differ"):
        SeedGroup([tiny_config(), tiny_config()], prepared)
