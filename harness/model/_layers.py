"""Running a BERT-like Hugging Face encoder layer by layer, with its own weights and submodules.

``layer_forward`` does a ``BertLayer``'s self-attention itself (the projections, LayerNorms and
feed-forward block are the layer's own modules) for three reasons:
- speed on CPU: attention dropout goes through the cheaper ``dropout`` below instead of SDPA's
  math path with ``bernoulli_`` (a large share of a training step on CPU; the trainer's measured
  speed is in benchmarks/results/trainer.md);
- the cascade ranker stops at an exit layer and resumes from its partial encodings;
- the [CLS] cross-encoder reads one token of the last layer, so that layer only needs the keys and
  values of every token and the query, attention output and feed-forward block of [CLS]. On the
  6-layer packaged encoder this skips about 1/7 of the training FLOPs and activation memory, and
  the result is the same function (``tests/model/test_ranker.py`` checks it against the full
  encoder, with and without padding).

"BERT-like" means ``embeddings`` plus ``encoder.layer``, each layer with ``attention.self``
(``query``, ``key``, ``value``, ``dropout``, ``attention_head_size``), ``attention.output``,
``intermediate`` and ``output`` as in ``BertLayer`` (BERT, MiniLM, ELECTRA and their kin).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# An additive mask's value at padding: the lowest bf16, finite in float32 and bf16 alike (the lowest
# float32 rounds to -inf in bf16).
_MASKED = float(torch.finfo(torch.bfloat16).min)
_LAYER_PARTS = ("attention.self.query", "attention.self.key", "attention.self.value",
                "attention.self.dropout", "attention.output", "intermediate", "output")


def is_bert_like(encoder: Any) -> bool:
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if not hasattr(encoder, "embeddings") or not layers:
        return False
    last = layers[-1]
    for part in _LAYER_PARTS:
        obj = last
        for name in part.split("."):
            obj = getattr(obj, name, None)
            if obj is None:
                return False
    return not getattr(encoder.config, "is_decoder", False)


def embed(encoder: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """H_0 = E(X): token, position and segment embeddings (with their LayerNorm and dropout)."""
    return encoder.embeddings(  # type: ignore[no-any-return]
        input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))


class _Dropout(torch.autograd.Function):
    """out = x * keep / (1 - p), saving the keep mask (one byte per element) for backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.mul(x, keep).mul_(scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return torch.mul(grad, keep).mul_(ctx.scale), None, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as ``F.dropout``, cheaper on CPU.

    Why: on CPU ``F.dropout`` draws one float per element with ``bernoulli_``, and a training step
    of the packaged encoder has 20 dropouts, 6 of them over the (B, heads, L, L) attention weights,
    so those draws are a large share of the step (benchmarks/results/trainer.md records the
    trainer's speed with this dropout). Here every element gets 16 random bits instead (four per
    64-bit draw from torch's generator, so ``torch.manual_seed`` still fixes the masks): an element
    is dropped with probability t / 65536, t = round(65536 p), and kept ones are scaled by
    65536 / (65536 - t), which keeps E[out] = x exactly; p is quantised to 1/65536 (0.1 ->
    0.0999908). Off CPU this is ``F.dropout``."""
    if not training or p <= 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, True)
    t = min(65535, max(1, round(p * 65536)))
    n = x.numel()
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
    keep = bits.view(torch.int16)[:n].view(x.shape) >= (t - 32768)
    return _Dropout.apply(x, keep, 65536.0 / (65536 - t))  # type: ignore[no-any-return]


class FastDropout(nn.Dropout):
    """``nn.Dropout`` with the fast CPU path of ``dropout``; swapped in by ``use_fast_dropout``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def use_fast_dropout(module: nn.Module) -> nn.Module:
    """Replaces every plain ``nn.Dropout`` inside ``module`` by ``FastDropout`` with the same p
    (no parameters change, so checkpoints are unaffected)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, FastDropout(child.p))
    return module


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, p: float,
           scale: float) -> torch.Tensor:
    """softmax(q k^T * scale, over keys where ``keep``) v, with attention dropout p (0 in eval).

    Without dropout, or off CPU, this is ``F.scaled_dot_product_attention``; ``keep`` may then also
    be an additive mask (``Packing.additive``: one per batch for every layer, where a boolean mask
    is converted by SDPA in every layer). With dropout on CPU, SDPA takes its math path anyway, so
    the same math is written out here with the fast ``dropout``."""
    if p <= 0.0 or q.device.type != "cpu":
        if keep.dtype != torch.bool:
            keep = keep.to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p, scale=scale)
    bias = torch.zeros(keep.shape, dtype=q.dtype).masked_fill_(~keep, torch.finfo(q.dtype).min)
    weights = torch.softmax(torch.matmul(q, k.transpose(-1, -2)).mul_(scale).add_(bias), dim=-1)
    return torch.matmul(dropout(weights, p, True), v)


class Packing:
    """The real tokens of a padded (B, L) batch, packed into (N, H) rows ("unpadding").

    Projections, LayerNorms, dropout and feed-forward blocks then run on N = sum of lengths rows
    instead of B * L; only attention needs the padded (B, heads, L, d) layout, and gets it by a
    scatter. Position 0 of every row is always kept (it is [CLS], read by the rankers).

    ``index`` and ``first`` given (``Packing.of`` takes them from a batch the collator built with
    ``packing=True``), nothing is read back from the device: on CUDA the step then never waits for
    the GPU. Without them they are computed from the mask (``nonzero``: a device-to-host read).
    ``dense`` (every position a row) follows from the index's length, a shape known on the host."""

    def __init__(self, attention_mask: torch.Tensor, index: torch.Tensor | None = None,
                 first: torch.Tensor | None = None) -> None:
        real = attention_mask.bool()
        self.batch, self.length = (int(x) for x in real.shape)
        self.keep = real.view(self.batch, 1, 1, self.length)
        if index is None or first is None:
            rows = real.clone()
            rows[:, 0] = True
            counts = rows.sum(dim=1)
            index = rows.flatten().nonzero().squeeze(1)
            # Row b's position 0 sits at packed row (tokens of rows before b).
            first = torch.cumsum(counts, 0) - counts
        self.index, self.first = index, first
        self.dense = int(index.shape[0]) == self.batch * self.length
        self._additive: torch.Tensor | None = None

    def additive(self) -> torch.Tensor:
        """``keep`` as an additive float32 mask (0 kept, ``_MASKED`` at padding), built once
        for every layer of the batch. Position 0 of every row is real, so no row is fully masked."""
        if self._additive is None:
            self._additive = torch.zeros(self.keep.shape, dtype=torch.float32, device=self.keep.device
                                         ).masked_fill(~self.keep, _MASKED)
        return self._additive

    @classmethod
    def of(cls, batch: dict[str, torch.Tensor]) -> Packing:
        """The packing of a batch: its ``packed_index`` and ``first`` where the collator put them."""
        return cls(batch["attention_mask"], batch.get("packed_index"), batch.get("first"))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(self.batch * self.length, -1)
        return flat if self.dense else flat.index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        if not self.dense:
            x = x.new_zeros(self.batch * self.length, x.shape[-1]).index_copy(0, self.index, x)
        return x.view(self.batch, self.length, -1)


def layer_forward(layer: Any, packed: torch.Tensor, packing: Packing, *,
                  first_only: bool = False) -> torch.Tensor:
    """One ``BertLayer`` on the packed (N, H) tokens of a batch; returns (N, H).

    With ``first_only`` it returns (B, H), position 0 of each row alone: every token still provides
    keys and values, but only [CLS] gets a query, the attention output projection, the residual
    LayerNorms and the feed-forward block. The layer's own submodules (projections, LayerNorms,
    activation, dropout) do the work, so weights and hyper-parameters are the model's."""
    sa = layer.attention.self
    b, n = packing.batch, packing.length
    d = int(sa.attention_head_size)

    def heads(x: torch.Tensor, length: int) -> torch.Tensor:
        return x.view(b, length, -1, d).transpose(1, 2)

    src = packed.index_select(0, packing.first) if first_only else packed
    k, v = heads(packing.unpack(sa.key(packed)), n), heads(packing.unpack(sa.value(packed)), n)
    q = heads(sa.query(src), 1) if first_only else heads(packing.unpack(sa.query(src)), n)
    p = float(sa.dropout.p) if layer.training else 0.0
    # Off CPU one additive mask serves every layer; on CPU the boolean mask (the fast dropout path).
    keep = packing.keep if q.device.type == "cpu" else packing.additive()
    att = attend(q, k, v, keep, p, float(getattr(sa, "scaling", d ** -0.5)))
    att = att.transpose(1, 2).reshape(b * q.shape[2], -1)
    if not first_only:
        att = packing.pack(att)
    x = layer.attention.output(att, src)
    return layer.output(layer.intermediate(x), x)  # type: ignore[no-any-return]


def run_layers(encoder: Any, hidden: torch.Tensor, attention_mask: torch.Tensor, start: int,
               stop: int, packing: Packing | None = None) -> torch.Tensor:
    """H_stop from H_start (0-based layer counts, (B, L, H) each): layers start+1 .. stop.
    Positions that are padding come back as zeros. ``packing``: that of ``attention_mask``
    (``Packing.of(batch)``), else computed from it."""
    if stop <= start:
        return hidden
    if packing is None:
        packing = Packing(attention_mask)
    packed = packing.pack(hidden)
    for layer in encoder.encoder.layer[start:stop]:
        packed = layer_forward(layer, packed, packing)
    return packing.unpack(packed)


def first_token_state(encoder: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, H): the last layer's [CLS] encoding, as ``encoder(**batch).last_hidden_state[:, 0]``."""
    mask = batch["attention_mask"]
    if not is_bert_like(encoder):
        out = encoder(input_ids=batch["input_ids"], attention_mask=mask,
                      token_type_ids=batch.get("token_type_ids"))
        return out.last_hidden_state[:, 0]  # type: ignore[no-any-return]
    layers = encoder.encoder.layer
    packing = Packing.of(batch)
    packed = packing.pack(embed(encoder, batch))
    for layer in layers[:-1]:
        packed = layer_forward(layer, packed, packing)
    return layer_forward(layers[-1], packed, packing, first_only=True)
