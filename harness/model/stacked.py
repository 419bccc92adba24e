"""k replicas of the cross-encoder ranker as one model: stacked weights, one batched forward.

``StackedCrossEncoder`` holds every parameter of k ``CrossEncoder`` replicas (same architecture,
their own values) as one ``[k, ...]`` tensor, and computes the k replicas' training logits, each on
its own batch, with batched matrix products (``torch.baddbmm``) instead of k sequences of small
ones. It is the trainer's forward (``_layers.first_token_state`` and ``CrossEncoder.head``)
written over a leading replica axis:

- the replicas' batches are laid out on the host (``stack_batches`` -> ``StackedBatch``, no device
  value read): each replica's real tokens are packed into rows (as ``_layers.Packing`` does), or
  every position is a row (``dense``: the fixed shapes a compiled step wants), and the replicas'
  packed rows are padded to the longest replica's count (the padded rows are zeros, never read by a
  real row: their gradient is zero); attention uses the padded (k * B, heads, L, d) layout, L the
  widest replica's width, with every padded key masked by one additive mask;
- the last layer computes [CLS] only (``layer_forward(..., first_only=True)``);
- dropout: on CPU each replica's keep masks are drawn with the replica's own generator at the shape
  and in the order its separate run draws them from the global generator (``_layers.dropout``:
  embeddings, then per layer the attention weights, the attention output and the feed-forward
  output, then the head), so a replica sees the noise of its separate run; the masks are then padded
  and stacked. Off CPU dropout is ``F.dropout`` over the stacked tensors (the separate run's CUDA
  masks cannot be reproduced anyway).

Only a ``CrossEncoder`` over a Hugging Face ``BertModel`` with absolute position embeddings is
stacked (``unstackable`` says why another is not).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.model._layers import _Dropout, is_bert_like
from harness.model._ranker import CrossEncoder

Batch = dict[str, torch.Tensor]


def unstackable(model: nn.Module) -> str | None:
    """Why ``model`` cannot be stacked (None: it can)."""
    if not isinstance(model, CrossEncoder):
        return f"only the plain cross-encoder ranker is fused, not {type(model).__name__}"
    enc = model.encoder
    if type(enc).__name__ != "BertModel" or not is_bert_like(enc):
        return f"only BERT encoders are fused, not {type(enc).__name__}"
    if getattr(enc.config, "position_embedding_type", "absolute") != "absolute":
        return "only BERT encoders with absolute position embeddings are fused"
    return None


def _cpu_keep(shape: tuple[int, ...], p: float, gen: torch.Generator) -> torch.Tensor:
    """The keep mask ``_layers.dropout`` draws for a tensor of ``shape``, from ``gen``."""
    t = min(65535, max(1, round(p * 65536)))
    n = 1
    for d in shape:
        n *= d
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, generator=gen)
    return bits.view(torch.int16)[:n].view(shape) >= (t - 32768)


def _cpu_scale(p: float) -> float:
    t = min(65535, max(1, round(p * 65536)))
    return 65536.0 / (65536 - t)


@dataclass(frozen=True)
class StackedBatch:
    """The k replicas' batches laid out for ``StackedCrossEncoder`` (``stack_batches``): built on
    the host (a background thread in training), pinned and copied to the device with
    ``non_blocking`` (``to``), so the step never waits for a host-to-device copy.

    Tensors: ``ids``, ``types``, ``positions`` (k, N): each replica's packed rows (N the largest
    replica's count, padded with zeros); ``src`` and ``dest``: where the real packed rows sit in the
    (k * N) packed and the (k * B * L) padded layouts; ``first`` (k * B,): each pair's position 0 in
    the packed layout; ``keep`` (k * B, 1, 1, L): the keys each row attends to. The host-only
    ``widths``, ``counts`` and ``indices`` serve the CPU dropout that reproduces separate runs."""

    ids: torch.Tensor
    types: torch.Tensor
    positions: torch.Tensor
    src: torch.Tensor
    dest: torch.Tensor
    first: torch.Tensor
    keep: torch.Tensor
    widths: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()
    indices: tuple[torch.Tensor, ...] = ()

    TENSORS = ("ids", "types", "positions", "src", "dest", "first", "keep")

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, n) for n in self.TENSORS)

    def pin(self) -> StackedBatch:
        return replace(self, **{n: getattr(self, n).pin_memory() for n in self.TENSORS})

    def to(self, device: torch.device) -> StackedBatch:
        """On ``device``; from pinned memory the copies do not block the host."""
        nb = device.type == "cuda"
        return replace(self, **{n: getattr(self, n).to(device, non_blocking=nb) for n in self.TENSORS})


def stack_batches(batches: list[Batch], pad_id: int = 0, *, dense: bool = False) -> StackedBatch:
    """Lays out the k replicas' collated (host) batches, all of one batch size (``StackedBatch``).
    ``dense``: every position is a packed row (the layout of fixed shapes a compiled model wants:
    N = B * L for batches of one width L) instead of the real tokens and position 0 only."""
    masks = [b["attention_mask"] for b in batches]
    k, b = len(masks), int(masks[0].shape[0])
    widths = tuple(int(m.shape[1]) for m in masks)
    width = max(widths)
    keep = torch.zeros(k, b, width, dtype=torch.bool)
    indices, firsts, dest = [], [], []
    for r, mask in enumerate(masks):
        real = mask.bool()
        w = widths[r]
        if dense:
            index = torch.arange(b * w)
            firsts.append(torch.arange(b) * w)
        else:
            rows = real.clone()
            rows[:, 0] = True
            index = rows.flatten().nonzero().squeeze(1)  # positions in this replica's (B * L_r)
            counts = rows.sum(dim=1)
            firsts.append(torch.cumsum(counts, 0) - counts)
        indices.append(index)
        keep[r, :, :w] = real
        dest.append(r * b * width + (index // w) * width + index % w)
    counts_ = tuple(len(i) for i in indices)
    n = max(counts_)
    src = torch.cat([r * n + torch.arange(c) for r, c in enumerate(counts_)])
    first = torch.cat([r * n + f for r, f in enumerate(firsts)])

    def gather(key: str, fill: int) -> torch.Tensor:
        out = torch.full((k, n), fill, dtype=torch.long)
        for r, (batch, index) in enumerate(zip(batches, indices, strict=True)):
            x = batch.get(key)
            if x is not None:
                out[r, :len(index)] = x.flatten()[index]
            elif key == "token_type_ids":
                out[r, :len(index)] = 0
        return out

    positions = torch.zeros(k, n, dtype=torch.long)
    for r, (index, w) in enumerate(zip(indices, widths, strict=True)):
        positions[r, :len(index)] = index % w
    return StackedBatch(gather("input_ids", pad_id), gather("token_type_ids", 0), positions, src,
                        torch.cat(dest), first, keep.view(k * b, 1, 1, width), widths, counts_, tuple(indices))


class _Layout:
    """The shapes of a stacked batch, read from its tensors' shapes only (so a compiled forward
    depends on nothing else): k replicas, B pairs each, width L, N packed rows per replica."""

    def __init__(self, ids: torch.Tensor, src: torch.Tensor, dest: torch.Tensor, first: torch.Tensor,
                 keep: torch.Tensor, full: StackedBatch | None = None) -> None:
        self.k, self.rows = int(ids.shape[0]), int(ids.shape[1])
        self.batch = int(keep.shape[0]) // self.k
        self.width = int(keep.shape[-1])
        self.src, self.dest, self.first, self.keep = src, dest, first, keep
        self.device = ids.device
        self.full = full  # the host-side layout: the CPU dropout that reproduces separate runs

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(k, N, F) packed rows -> (k * B, L, F), zeros at padding."""
        f = x.shape[-1]
        rows = x.reshape(self.k * self.rows, f).index_select(0, self.src)
        out = x.new_zeros(self.k * self.batch * self.width, f).index_copy(0, self.dest, rows)
        return out.view(self.k * self.batch, self.width, f)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(k * B * L, F) -> (k, N, F), zeros in the padded rows."""
        f = x.shape[-1]
        rows = x.index_select(0, self.dest)
        return x.new_zeros(self.k * self.rows, f).index_copy(0, self.src, rows).view(self.k, self.rows, f)

    def first_rows(self, x: torch.Tensor) -> torch.Tensor:
        """(k, N, F) -> (k, B, F): each row's position 0."""
        return x.reshape(self.k * self.rows, -1).index_select(0, self.first).view(self.k, self.batch, -1)


class StackedCrossEncoder(nn.Module):
    """The parameters of k ``CrossEncoder`` replicas stacked (module docstring)."""

    def __init__(self, replicas: list[CrossEncoder]) -> None:
        super().__init__()
        lead = replicas[0]
        why = unstackable(lead)
        if why:
            raise ValueError(why)
        self.k = len(replicas)
        self.names = [n for n, _ in lead.named_parameters()]
        tables = [dict(m.named_parameters()) for m in replicas]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.stack([t[n].detach() for t in tables]).clone()) for n in self.names)
        self._slot = {n: i for i, n in enumerate(self.names)}
        enc = lead.encoder
        self.prefix = lead.prefix
        self.pool = (f"{self.prefix}.pooler" if getattr(enc, "pooler", None) is not None else "pooler")
        self.layers = len(enc.encoder.layer)
        sa = enc.encoder.layer[0].attention.self
        self.head_size = int(sa.attention_head_size)
        self.scaling = float(getattr(sa, "scaling", self.head_size ** -0.5))
        layer = enc.encoder.layer[0]
        self.p_embed = float(enc.embeddings.dropout.p)
        self.p_attn = float(sa.dropout.p)
        self.p_hidden = float(layer.attention.output.dropout.p)
        self.p_out = float(layer.output.dropout.p)
        self.p_head = float(lead.dropout.p)
        self.eps_embed = float(enc.embeddings.LayerNorm.eps)
        self.eps = float(layer.output.LayerNorm.eps)
        self.act = layer.intermediate.intermediate_act_fn
        self.pad_id = int(getattr(enc.config, "pad_token_id", 0) or 0)
        self._gens: list[torch.Generator] | None = None

    # -- parameters ----------------------------------------------------------------------------

    def param(self, name: str) -> nn.Parameter:
        """The stacked ``[k, ...]`` parameter of the replicas' parameter ``name``."""
        return self.weights[self._slot[name]]  # type: ignore[return-value]

    @torch.no_grad()
    def copy_in(self, i: int, model: nn.Module) -> None:
        """Replica i's weights from ``model`` (a replica-shaped ``CrossEncoder``)."""
        for name, p in model.named_parameters():
            self.param(name)[i].copy_(p)

    @torch.no_grad()
    def copy_out(self, i: int, model: nn.Module) -> None:
        """Replica i's weights into ``model``."""
        for name, p in model.named_parameters():
            p.copy_(self.param(name)[i])

    # -- forward -------------------------------------------------------------------------------

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, b = self.param(f"{name}.weight"), self.param(f"{name}.bias")
        return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))

    def _norm(self, x: torch.Tensor, name: str, eps: float) -> torch.Tensor:
        w, b = self.param(f"{name}.weight"), self.param(f"{name}.bias")
        y = F.layer_norm(x, (x.shape[-1],), eps=eps)
        return torch.addcmul(b.unsqueeze(1), y, w.unsqueeze(1))

    def _drop(self, x: torch.Tensor, p: float, lay: _Layout, shapes: Any, fit: Any) -> torch.Tensor:
        """Dropout on the stacked ``x``: on CPU with the replicas' generators, replica r's mask is
        drawn at ``shapes(lay.full)[r]`` (its separate run's shape) from its generator and
        ``fit(r, mask, out)`` lays it out as x's slice r; otherwise ``F.dropout``."""
        if p <= 0.0:
            return x
        if x.device.type != "cpu" or self._gens is None or lay.full is None:
            return F.dropout(x, p, True)
        keep = torch.zeros(x.shape, dtype=torch.bool)
        for r, (shape, gen) in enumerate(zip(shapes(lay.full), self._gens, strict=True)):
            fit(r, _cpu_keep(shape, p, gen), keep[r])
        return _Dropout.apply(x, keep, _cpu_scale(p))  # type: ignore[no-any-return]

    def _embed(self, ids: torch.Tensor, types: torch.Tensor, where: torch.Tensor, lay: _Layout) -> torch.Tensor:
        k = lay.k
        pre = f"{self.prefix}.embeddings"
        word = self.param(f"{pre}.word_embeddings.weight")
        tt = self.param(f"{pre}.token_type_embeddings.weight")
        pos = self.param(f"{pre}.position_embeddings.weight")
        offset = torch.arange(k, device=lay.device).unsqueeze(1)
        h = word.shape[-1]
        x = F.embedding(ids + offset * word.shape[1], word.reshape(-1, h))
        x = x + F.embedding(types + offset * tt.shape[1], tt.reshape(-1, h))
        x = x + F.embedding(where + offset * pos.shape[1], pos.reshape(-1, h))
        x = self._norm(x, f"{pre}.LayerNorm", self.eps_embed)

        def fit(r: int, mask: torch.Tensor, out: torch.Tensor) -> None:
            index = lay.full.indices[r]  # type: ignore[union-attr]
            out[:len(index)] = mask.view(-1, h).index_select(0, index)

        return self._drop(x, self.p_embed, lay, lambda full: [(lay.batch, w, h) for w in full.widths], fit)

    def _attend(self, q: torch.Tensor, kk: torch.Tensor, v: torch.Tensor, lay: _Layout, bias: torch.Tensor,
                first_only: bool) -> torch.Tensor:
        p = self.p_attn
        if p <= 0.0 or q.device.type != "cpu" or self._gens is None or lay.full is None:
            return F.scaled_dot_product_attention(q, kk, v, attn_mask=bias.to(q.dtype), dropout_p=p,
                                                  scale=self.scaling)
        weights = torch.softmax(torch.matmul(q, kk.transpose(-1, -2)).mul_(self.scaling).add_(bias), dim=-1)
        heads, lq = weights.shape[1], weights.shape[2]
        wide = weights.view(lay.k, lay.batch, heads, lq, lay.width)

        def fit(r: int, mask: torch.Tensor, out: torch.Tensor) -> None:
            w = lay.full.widths[r]  # type: ignore[union-attr]
            out[:, :, :mask.shape[2], :w] = mask

        def shapes(full: StackedBatch) -> list[tuple[int, ...]]:
            return [(lay.batch, heads, 1 if first_only else w, w) for w in full.widths]

        dropped = self._drop(wide, p, lay, shapes, fit)
        return torch.matmul(dropped.view_as(weights), v)

    def _layer(self, i: int, x: torch.Tensor, lay: _Layout, bias: torch.Tensor, first_only: bool) -> torch.Tensor:
        pre = f"{self.prefix}.encoder.layer.{i}"
        k, b, width, d = lay.k, lay.batch, lay.width, self.head_size
        h = x.shape[-1]

        def heads(t: torch.Tensor, length: int) -> torch.Tensor:
            return t.reshape(k * b, length, -1, d).transpose(1, 2)

        src = lay.first_rows(x) if first_only else x
        kk = heads(lay.unpack(self._linear(x, f"{pre}.attention.self.key")), width)
        v = heads(lay.unpack(self._linear(x, f"{pre}.attention.self.value")), width)
        q = self._linear(src, f"{pre}.attention.self.query")
        q = heads(q, 1) if first_only else heads(lay.unpack(q), width)
        att = self._attend(q, kk, v, lay, bias, first_only)
        att = att.transpose(1, 2).reshape(k * b * q.shape[2], -1)
        att = att.view(k, b, -1) if first_only else lay.pack(att)

        def fit(r: int, mask: torch.Tensor, out: torch.Tensor) -> None:
            out[:mask.shape[0]] = mask

        def shapes(full: StackedBatch) -> list[tuple[int, ...]]:
            return [(b, h)] * k if first_only else [(c, h) for c in full.counts]

        y = self._drop(self._linear(att, f"{pre}.attention.output.dense"), self.p_hidden, lay, shapes, fit)
        y = self._norm(y + src, f"{pre}.attention.output.LayerNorm", self.eps)
        z = self.act(self._linear(y, f"{pre}.intermediate.dense"))
        z = self._drop(self._linear(z, f"{pre}.output.dense"), self.p_out, lay, shapes, fit)
        return self._norm(z + y, f"{pre}.output.LayerNorm", self.eps)

    def logits(self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor, src: torch.Tensor,
               dest: torch.Tensor, first: torch.Tensor, keep: torch.Tensor,
               full: StackedBatch | None = None) -> torch.Tensor:
        """(k, B) training logits from a ``StackedBatch``'s tensors (``StackedBatch.tensors()``), on
        the weights' device. Everything here follows from the tensors and their shapes: no value is
        read back to the host, so it compiles to one graph per shape (``torch.compile(fullgraph=True)``
        holds: tests/training/test_fused_step.py)."""
        lay = _Layout(ids, src, dest, first, keep, full)
        # An additive mask, built once for every layer: 0 where a key is kept, the lowest bf16 (finite
        # in float32 and bf16) where it is padding; row 0 of every pair is real, none is fully masked.
        bias = torch.zeros(keep.shape, dtype=torch.float32, device=keep.device).masked_fill(
            ~keep, float(torch.finfo(torch.bfloat16).min))
        x = self._embed(ids, types, positions, lay)
        for i in range(self.layers):
            x = self._layer(i, x, lay, bias, first_only=i == self.layers - 1)
        with torch.autocast(x.device.type, enabled=False):
            pooled = torch.tanh(self._linear(x.float(), f"{self.pool}.dense"))
            pooled = self._drop(pooled, self.p_head, lay, lambda full: [(lay.batch, pooled.shape[-1])] * lay.k,
                                lambda r, mask, out: out.copy_(mask))
            return self._linear(pooled, "classifier").squeeze(-1)

    def forward(self, batch: StackedBatch, generators: list[torch.Generator] | None = None) -> torch.Tensor:
        """(k, B) training logits, replica r on its slice of ``batch`` (on the weights' device). With
        ``generators`` (CPU), replica r's dropout masks come from ``generators[r]``, as its separate
        run draws them."""
        self._gens = generators
        try:
            return self.logits(*batch.tensors(), full=batch if generators is not None else None)
        finally:
            self._gens = None
