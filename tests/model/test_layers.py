"""The fast CPU dropout and the written-out attention: the same distribution and function as
``F.dropout`` and SDPA, seeded by torch's generator."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.config import ModelConfig
from harness.model._layers import FastDropout, attend, dropout, use_fast_dropout
from harness.model.encoder import load_encoder


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_drop_rate_and_scale(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(400, 1000)
    out = dropout(x, p, True)
    t = round(p * 65536)
    dropped = (out == 0).float().mean().item()
    assert abs(dropped - t / 65536) < 4 * (p * (1 - p) / x.numel()) ** 0.5  # within 4 sigma
    kept = out[out != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 65536 / (65536 - t)))
    assert abs(out.mean().item() - 1.0) < 0.01  # inverted dropout keeps the mean


def test_drops_are_independent_of_position() -> None:
    """16-bit lanes of one 64-bit draw must not correlate: neighbours drop independently."""
    torch.manual_seed(1)
    drop = dropout(torch.ones(2_000_000), 0.5, True) == 0
    both = (drop[:-1] & drop[1:]).float().mean().item()
    assert abs(both - 0.25) < 0.002
    for lane in range(4):
        assert abs(drop[lane::4].float().mean().item() - 0.5) < 0.003


def test_seeded_by_torch_and_backward_uses_the_same_mask() -> None:
    x = torch.randn(8, 33, requires_grad=True)
    torch.manual_seed(5)
    a = dropout(x, 0.1, True)
    torch.manual_seed(5)
    b = dropout(x, 0.1, True)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    a.sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, (a != 0).float() * (a / x).nan_to_num().max())


def test_eval_and_zero_p_are_the_identity() -> None:
    x = torch.randn(5, 7)
    assert dropout(x, 0.1, False) is x and dropout(x, 0.0, True) is x
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))


def test_use_fast_dropout_swaps_every_dropout_and_keeps_p() -> None:
    enc = load_encoder(ModelConfig(name="tiny"), seed=0)
    before = [m.p for m in enc.modules() if isinstance(m, torch.nn.Dropout)]
    state = {k: v.clone() for k, v in enc.state_dict().items()}
    use_fast_dropout(enc)
    after = [m for m in enc.modules() if isinstance(m, torch.nn.Dropout)]
    assert after and all(type(m) is FastDropout for m in after)
    assert [m.p for m in after] == before
    assert all(torch.equal(v, state[k]) for k, v in enc.state_dict().items())


def test_attend_equals_sdpa() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 4) for _ in range(3))
    keep = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    keep[1, ..., 6:] = False
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.3)
    torch.testing.assert_close(attend(q, k, v, keep, 0.0, 0.3), ref, rtol=0, atol=0)
    # The written-out path with dropout: at p = 1/65536 nothing of these 486 weights is dropped
    # (seeded), so only the 65536/65535 rescaling separates it from SDPA.
    torch.manual_seed(3)
    out = attend(q, k, v, keep, 1 / 65536, 0.3)
    torch.testing.assert_close(out, ref * 65536 / 65535, rtol=1e-5, atol=1e-6)
