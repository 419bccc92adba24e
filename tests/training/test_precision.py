"""bf16 autocast on CPU: where it is used, that it is recorded, and that learning is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.model.encoder import load_encoder
from harness.training._precision import MIN_CPU_HIDDEN, cpu_has_bf16, hidden_size, use_bf16
from harness.training.loop import FinalRecord, StepRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits


def test_cpu_bf16_needs_the_flag_a_big_enough_encoder_and_train_bf16() -> None:
    cpu = torch.device("cpu")
    tiny = load_encoder(tiny_config().model, seed=0)
    assert hidden_size(tiny) == 32 < MIN_CPU_HIDDEN
    wide = torch.nn.Linear(2, 2)
    assert hidden_size(wide) is None
    assert use_bf16(True, cpu, tiny) is False  # too small to pay for the casts
    assert use_bf16(True, cpu, wide) is cpu_has_bf16()
    assert use_bf16(False, cpu, wide) is False
    assert use_bf16(True, torch.device("cuda")) is True
    assert use_bf16(False, torch.device("cuda")) is False


@pytest.mark.slow
def test_the_effective_precision_is_recorded() -> None:
    splits = toy_splits()
    prepared = prepare_data(splits, tiny_config().model)
    trainer = Trainer(tiny_config(**{"train.steps": 2, "train.eval_every": 2}), prepared)
    last = None
    for rec in trainer.run():
        last = rec
    assert isinstance(last, FinalRecord)
    assert last.resolved["train.bf16_effective"] == float(trainer.autocast) == 0.0  # tiny: fp32


def _final_maps(prepared, bf16: bool, seeds: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """Per seed the test MAP, and every logged training loss of all seeds."""
    out, losses = [], []
    for seed in seeds:
        trainer = Trainer(tiny_config(**{"train.steps": 60, "train.seed": seed}), prepared)
        trainer.autocast = bf16  # force the precision under test on the tiny encoder
        last = None
        for rec in trainer.run():
            last = rec
            if isinstance(rec, StepRecord):
                losses.append(rec.loss)
        assert isinstance(last, FinalRecord)
        assert last.resolved["train.bf16_effective"] == float(bf16)
        out.append(last.metrics["map"])
    return out, losses


@pytest.mark.slow
def test_toy_task_learns_the_same_in_bf16_and_fp32() -> None:
    """The toy task (5 candidates, one relevant: random MAP 0.457) trained with three seeds in each
    precision: every run learns it, and the mean test MAPs agree within seed noise."""
    prepared = prepare_data(toy_splits(), tiny_config().model)
    seeds = (1, 2, 3)
    (fp32, fp32_loss), (bf16, bf16_loss) = (_final_maps(prepared, False, seeds),
                                            _final_maps(prepared, True, seeds))
    assert min(fp32) > 0.85 and min(bf16) > 0.85
    noise = max(np.std(fp32), np.std(bf16), 0.02)
    assert abs(np.mean(bf16) - np.mean(fp32)) <= 3 * noise
    assert fp32_loss != bf16_loss  # bf16 really ran: other numerics, other losses
