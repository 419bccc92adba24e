"""Cascade evaluation: training through the Trainer improves every exit; the offline replay of
stored exit scores equals live cascade inference; the alpha sweep and the Table 3 report."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from harness.errors import DataError
from harness.metrics.measures import evaluate
from harness.model.cascade_eval import (
    alpha_grid,
    cascade_metrics,
    cascade_report,
    exit_metrics,
    relative_cost,
    report_markdown,
    run_cascade,
    score_exits,
    sweep,
)
from harness.records import Splits, qrels_of
from harness.training.loop import Trainer
from harness.training.tokenized import PreparedData, prepare_data
from tests.conftest import tiny_config, toy_splits


@dataclass
class Trained:
    trainer: Trainer
    data: PreparedData
    splits: Splits
    before: dict[int, float]
    after: dict[int, float]
    dev_exit_scores: list[np.ndarray]


def dev_maps(trainer: Trainer, data: PreparedData) -> tuple[dict[int, float], list[np.ndarray]]:
    mats = score_exits(trainer.model, trainer.collator, data.splits.dev, data.dev, batch_size=64,
                       device=trainer.device)
    per_exit = exit_metrics(data.splits.dev, mats, trainer.model.exits, metrics=["map"])
    return {layer: m.means["map"] for layer, m in per_exit.items()}, mats


@pytest.fixture(scope="module")
def trained() -> Trained:
    splits = toy_splits(n_train=120, n_dev=24, n_test=8, n_cands=6)
    cfg = tiny_config(**{"cascade.enabled": True, "train.steps": 40, "train.eval_every": 40})
    data = prepare_data(splits, cfg.model)
    trainer = Trainer(cfg, data)
    before, _ = dev_maps(trainer, data)
    for _ in trainer.run():
        pass
    after, mats = dev_maps(trainer, data)
    return Trained(trainer, data, splits, before, after, mats)


@pytest.mark.slow
def test_training_a_cascade_improves_every_exit(trained: Trained) -> None:
    assert set(trained.before) == set(trained.after) == {2, 3, 4}
    for layer in (2, 3, 4):
        assert trained.after[layer] > trained.before[layer] + 0.05, (trained.before, trained.after)


def test_trainer_dev_map_is_the_final_exit(trained: Trained) -> None:
    # The loop's evaluation uses model.score = the final exit: its dev MAP is the last exit's.
    final_dev = trained.trainer.curve[-1][1]["map"]
    assert final_dev == pytest.approx(trained.after[4], abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [(0.0,), (0.3,), (0.5, 0.25, 0.0)])
def test_offline_replay_equals_live_cascade(trained: Trained, alpha: tuple[float, ...]) -> None:
    model, data = trained.trainer.model, trained.data
    plan = model.plan.with_alpha(alpha)
    live = run_cascade(model, trained.trainer.collator, data.splits.dev, data.dev, plan, device="cpu")
    offline = cascade_metrics(data.splits.dev, trained.dev_exit_scores, plan)
    run = {q.qid: {c.doc_id: float(s) for c, s in zip(q.candidates, sc, strict=True)}
           for q, sc in zip(data.splits.dev, live, strict=True)}
    live_m = evaluate(qrels_of(data.splits.dev), run)
    for name, values in offline.metrics.per_query.items():
        for qid, v in values.items():
            assert live_m.per_query[name][qid] == pytest.approx(v, abs=1e-9), (name, qid)
    if alpha == (0.0,):
        full = exit_metrics(data.splits.dev, trained.dev_exit_scores, model.exits)[4]
        assert offline.metrics.per_query == full.per_query
        assert offline.relative_cost == 1.0


@pytest.mark.slow
def test_sweep_over_the_figure2_grid(trained: Trained) -> None:
    model, dev = trained.trainer.model, trained.splits.dev
    grid = alpha_grid(len(model.exits), (0.1, 0.3, 0.5))
    assert len(grid) == 9 and all(g[-1] == 0.0 for g in grid)
    points = sweep(dev, trained.dev_exit_scores, model.plan, grid, metrics=["map", "p_1"])
    assert len(points) == 9
    costs = [p.relative_cost for p in points]
    assert costs[0] == 1.0  # floor(0.1 * 6) = 0: nothing dropped
    assert all(0 < c <= 1 for c in costs)
    # 6 candidates per query; alphas (0.5, 0.5): 6 -> 3 -> 2: (2*6 + 1*3 + 1*2) / (4*6)
    assert costs[-1] == pytest.approx(17 / 24)
    assert relative_cost([6] * len(dev), model.plan.with_alpha((0.5,))) == pytest.approx(17 / 24)
    assert len(alpha_grid(5)) == 6 ** 4  # the paper's Figure 2 grid


def test_table3_report(trained: Trained) -> None:
    model, dev = trained.trainer.model, trained.splits.dev
    rows = cascade_report(dev, trained.dev_exit_scores, model.plan, settings=((0.3,), (0.5,)))
    assert [r.name for r in rows] == ["2 layers CT", "3 layers CT", "Full CT (4 layers)",
                                      "Full CT (4 layers)", "Full CT (4 layers)"]
    assert [r.relative_cost for r in rows[:3]] == [0.5, 0.75, 1.0]
    assert rows[2].means["map"] == pytest.approx(trained.after[4])
    md = report_markdown(rows)
    assert "| 2 layers CT | 0.0 |" in md and "-50% |" in md and "| Full CT (4 layers) | 0.5 |" in md


def test_bad_shapes_are_refused(trained: Trained) -> None:
    with pytest.raises(DataError, match="shape"):
        exit_metrics(trained.splits.dev, [m[:2] for m in trained.dev_exit_scores], (2, 3, 4))
