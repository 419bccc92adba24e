"""train.compile: the setting, compiled training equal to eager in the same (padded, width-bucketed)
layout, and the eager fallback when compiling fails.

The tests compile with the ``aot_eager`` backend (dynamo's graph capture and AOTAutograd's
forward/backward split, without code generation); the slow one with inductor, which needs a C
compiler and takes minutes on 2 cores."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
import torch

from harness.config import TrialConfig
from harness.errors import ConfigError
from harness.model.scoring import score_candidates
from harness.training import _compile
from harness.training.loop import Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture(scope="module")
def data():
    return prepare_data(toy_splits(n_train=40, n_dev=6, n_test=4), tiny_config().model)


def test_setting_is_parsed_and_resolved_per_device() -> None:
    assert TrialConfig.from_flat({"train.compile": True}).train.compile == "true"
    assert TrialConfig.from_flat({"train.compile": "False"}).train.compile == "false"
    assert TrialConfig().train.compile == "auto"
    with pytest.raises(ConfigError, match=r"^train.compile must be one of auto, true, false, got 'yes'$"):
        TrialConfig.from_flat({"train.compile": "yes"})
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert [_compile.use_compile(m, cpu) for m in ("auto", "true", "false")] == [False, True, False]
    assert [_compile.use_compile(m, cuda) for m in ("auto", "true", "false")] == [True, True, False]
    # The default leaves the configuration id as it was before the option; a choice changes it.
    assert TrialConfig().config_id() != TrialConfig.from_flat({"train.compile": "false"}).config_id()


def _steps(cfg: TrialConfig, data, *, dense_eager: bool = False, n: int = 3) -> tuple[Trainer, list[float]]:
    trainer = Trainer(cfg, data)
    if dense_eager:  # eager in the layout a compiled run uses
        trainer.collator.width_multiple, trainer.collator.dense = _compile.WIDTH_MULTIPLE, True
    trainer.model.train()
    losses = [float(trainer.train_step(trainer.step_inputs(s, data.train), data.splits.train, data.train).detach())
              for s in range(n)]
    return trainer, losses


def _dev_scores(trainer: Trainer, data) -> np.ndarray:
    queries = data.splits.dev
    out = score_candidates(trainer.model, trainer.collator, queries, data.tokens("dev"), batch_size=8,
                           device="cpu", autocast=False)
    return np.concatenate(out)


@pytest.mark.slow  # minutes of graph capture on 2 busy cores
def test_compiled_training_equals_eager_in_the_same_layout(data, monkeypatch) -> None:
    monkeypatch.setattr(_compile, "BACKEND", "aot_eager")
    flat = {"train.loss": "pairwise", "train.steps": 3}
    compiled, got = _steps(tiny_config(**flat, **{"train.compile": "true"}), data)
    eager, want = _steps(tiny_config(**flat, **{"train.compile": "false"}), data, dense_eager=True)
    assert compiled.collator.dense and compiled.collator.width_multiple == _compile.WIDTH_MULTIPLE
    assert not eager.resolved()["train.compile_effective"]
    assert compiled.resolved()["train.compile_effective"] == 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    # Scoring (evaluation mode, inference_mode, the last batch shorter) with the same weights.
    eager.model.load_state_dict(compiled.model.state_dict())
    np.testing.assert_allclose(_dev_scores(compiled, data), _dev_scores(eager, data), rtol=0, atol=1e-5)
    assert compiled.resolved()["train.compile_effective"] == 1.0


@pytest.mark.slow
def test_a_failing_compile_warns_once_and_runs_eager(data, monkeypatch) -> None:
    calls = []

    def broken(gm, example_inputs):
        calls.append(1)
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(_compile, "BACKEND", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, got = _steps(tiny_config(**{"train.compile": "true"}), data)
    _, want = _steps(tiny_config(**{"train.compile": "false"}), data, dense_eager=True)
    said = [w for w in caught if "train.compile" in str(w.message)]
    assert len(said) == 1 and "no compiler here" in str(said[0].message)
    assert len(calls) == 1  # never tried again
    assert compiled.resolved()["train.compile_effective"] == 0.0
    assert got == want  # eager, in the same layout: the same numbers


@pytest.mark.heavy  # inductor's C++ compile of every kernel: minutes on 2 cores
@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="inductor needs a C compiler")
def test_inductor_on_cpu_trains_as_eager(data, monkeypatch) -> None:
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor, "fallback_random", True)  # dropout draws as eager does
    compiled, got = _steps(tiny_config(**{"train.compile": "true"}), data, n=2)
    _, want = _steps(tiny_config(**{"train.compile": "false"}), data, dense_eager=True, n=2)
    assert compiled.resolved()["train.compile_effective"] == 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
