"""A cascade trial reports every exit's metrics and the cascade's metrics and cost (Table 3 rows)."""

from __future__ import annotations

import pytest

from harness.training.loop import FinalRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits


@pytest.fixture(scope="module")
def prepared():
    return prepare_data(toy_splits(), tiny_config().model)


def _final(cfg, prepared) -> tuple[Trainer, FinalRecord]:
    t = Trainer(cfg, prepared)
    rec = list(t.run())[-1]
    assert isinstance(rec, FinalRecord)
    return t, rec


def test_alpha_zero_cascade_is_the_full_model(prepared):
    cfg = tiny_config(**{"cascade.enabled": True, "cascade.exits": [2, 3, 4], "cascade.alpha": [0.0]})
    trainer, rec = _final(cfg, prepared)
    assert {f"test_exit{layer}_map" for layer in (2, 3, 4)} <= set(rec.cascade)
    assert rec.cascade["test_cascade_cost"] == 1.0 and rec.cascade["cascade_cost"] == 1.0
    assert rec.cascade["test_cascade_map"] == rec.metrics["map"] == rec.cascade["test_exit4_map"]
    # The record's test metrics are the final exit's, the same as scoring the best model directly.
    trainer.model.load_state_dict(trainer.best_state)
    queries, scores = trainer._scores("test")
    from harness.model.scoring import metrics_of

    assert metrics_of(queries, scores).means == rec.metrics


def test_alpha_drops_candidates_and_cuts_cost(prepared):
    cfg = tiny_config(**{"cascade.enabled": True, "cascade.exits": [2, 4], "cascade.alpha": [0.4]})
    _, rec = _final(cfg, prepared)
    # 5 candidates: exit at layer 2 drops floor(0.4 * 5) = 2; cost = (2*5 + 2*3) / (4*5) = 0.8.
    assert rec.cascade["test_cascade_cost"] == pytest.approx(0.8)
    assert rec.cascade["cascade_cost"] == pytest.approx(0.8)
    assert 0.0 <= rec.cascade["test_cascade_map"] <= 1.0
