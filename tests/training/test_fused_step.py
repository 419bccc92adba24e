"""The fused step has no host stall: its forward and losses, and its gradient clip, each compile as
ONE graph (``torch.compile(fullgraph=True)`` raises at a graph break) in which no operation reads a
device value back to the host: no ``.item()``, ``.tolist()`` or ``bool(tensor)``, and no value whose
shape or number depends on the data (``nonzero``, boolean indexing), which dynamo records as an
unbacked symbol (``u0``) or refuses; the step's inputs are built on the host ahead of it; and the
foreach clip is each replica's ``clip_grad_norm_``.

Graphs are captured by dynamo with a backend that keeps them and runs them as captured (no code
generation: what is checked is the capture, not the kernels; tests/training/graphs.py). The plain
step's own test is tests/training/test_step_graph.py."""

from __future__ import annotations

import pytest
import torch

from harness.training import _compile
from harness.training.fused import SeedGroup
from tests.conftest import tiny_config
from tests.training.graphs import assert_no_host_read

FLAT = {"train.steps": 4, "train.eval_every": 4, "train.batch_size": 4, "train.bf16": False}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _engine(prepared, **flat):
    cfgs = [tiny_config(**{**FLAT, **flat, "train.seed": s}) for s in (1, 2)]
    return SeedGroup(cfgs, prepared, fused=True)._engine


@pytest.mark.slow
def test_the_detector_finds_a_host_read():
    """Each way of reading a device value back is caught: as a graph break, or as a node that
    needs the value on the host."""
    for read in (lambda x: x.sum().item() * x, lambda x: x.sum().tolist(), lambda x: x[x > 0] * 2,
                 lambda x: x.nonzero() + 1, lambda x: x * 2 if bool(x.sum() > 0) else x):
        with pytest.raises((AssertionError, Exception)):
            assert_no_host_read(read, torch.ones(3))
        torch._dynamo.reset()
    assert_no_host_read(lambda x: (x * 2).sum(), torch.ones(3))  # and a plain one passes


@pytest.mark.slow
@pytest.mark.parametrize("flat", [{}, {"train.loss": "pairwise"}, {"train.loss": "pointwise_mse"},
                                  {"train.compile": "true"}],
                         ids=["pointwise", "pairwise", "squared-error", "compiled-layout"])
def test_the_fused_step_compiles_to_one_graph(prepared, monkeypatch, flat):
    monkeypatch.setattr(_compile, "BACKEND", "eager")
    engine = _engine(prepared, **flat)
    inputs = engine.step_inputs(0)
    assert inputs.stacked.ids.shape[0] == 2
    if engine.compiled is not None:  # the dense layout of one padded width: N = B' * L per replica
        rows = inputs.stacked.ids.shape[1]
        assert rows == inputs.stacked.keep.shape[0] // 2 * inputs.stacked.keep.shape[-1]
    stacked = inputs.stacked.to(engine.device)
    args = (*stacked.tensors(), engine._upload(inputs.weights), engine._upload(inputs.targets))
    torch.manual_seed(0)
    want = engine.losses(*args)
    torch.manual_seed(0)
    got = assert_no_host_read(engine.losses, *args)
    assert got.shape == (2,) and torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    got.sum().backward()
    torch._dynamo.reset()
    assert_no_host_read(engine.clip, 1.0)


def test_the_foreach_clip_is_each_replicas_clip_grad_norm(prepared):
    engine = _engine(prepared)
    torch.manual_seed(0)
    for p in engine.params:
        p.grad = torch.randn_like(p) * (3.0 if p.ndim > 1 else 0.01)
    small = engine.params[-1]
    small.grad[1].zero_()  # replica 1's norm differs from replica 0's
    want = []
    for r in range(engine.k):
        grads = [p.grad[r].clone() for p in engine.params]
        torch.nn.utils.clip_grad_norm_(grads_as_params(grads), 0.5)
        want.append(grads)
    engine.clip(0.5)
    for r in range(engine.k):
        for p, g in zip(engine.params, want[r], strict=True):
            torch.testing.assert_close(p.grad[r], g, rtol=1e-5, atol=1e-7)


def grads_as_params(grads):
    """Parameters whose gradients are ``grads`` (clip_grad_norm_ scales them in place)."""
    out = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros_like(g))
        p.grad = g
        out.append(p)
    return out


@pytest.mark.slow
def test_compiled_fused_steps_count_one_compile_per_width(prepared, monkeypatch):
    """Compiled, every member's pairs share one padded width (a multiple of WIDTH_MULTIPLE, capped at
    model.max_length): the widths a batch can have are compiled before the first step
    (``precompile``), and steps of those widths compile nothing more."""
    monkeypatch.setattr(_compile, "BACKEND", "eager")
    engine = _engine(prepared, **{"train.compile": "true"})
    possible = engine.members[0].train_widths()
    assert engine.precompile() == len(possible) == engine.compiled.compiles
    for s in range(3):
        inputs = engine.step_inputs(s)
        width = inputs.stacked.keep.shape[-1]
        assert width in possible and (width % _compile.WIDTH_MULTIPLE == 0 or width == 32)  # tiny: max_length 32
        losses = engine.train_step(inputs)
        assert torch.isfinite(losses).all()
    assert engine.compiled.effective
    assert engine.compiled.compiles == len(possible)
    assert engine.step == 3 and all(m.step == 3 for m in engine.members)
