"""k replicas of the cross-encoder ranker as one model: stacked weights, one batched forward.

``StackedCrossEncoder`` holds every parameter of k ``CrossEncoder`` replicas (same architecture,
their own values) as one ``[k, ...]`` tensor, and computes the k replicas' training logits, each on
its own batch, with batched matrix products (``torch.baddbmm``) instead of k sequences of small
ones. It is the trainer's forward (``_layers.first_token_state`` and ``CrossEncoder.head``)
written over a leading replica axis:

- each replica's real tokens are packed into rows (as ``_layers.Packing`` does), and the replicas'
  packed rows are padded to the longest replica's count (the padded rows are zeros, never read by a
  real row: their gradient is zero); attention uses the padded (k * B, heads, L, d) layout, L the
  widest replica's width, with every padded key masked;
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
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1, generator=gen)
    return bits.view(torch.int16)[:n].view(shape) >= (t - 32768)


def _cpu_scale(p: float) -> float:
    t = min(65535, max(1, round(p * 65536)))
    return 65536.0 / (65536 - t)


class _Layout:
    """Where the k replicas' packed rows sit: (k, N) packed rows, N the largest replica's count;
    the padded attention layout (k * B, L), L the widest replica's width."""

    def __init__(self, masks: list[torch.Tensor], device: torch.device) -> None:
        self.k = len(masks)
        self.batch = int(masks[0].shape[0])
        self.widths = [int(m.shape[1]) for m in masks]
        self.width = max(self.widths)
        k, b, width = self.k, self.batch, self.width
        self.indices, self.firsts = [], []
        src, dest = [], []
        keep = torch.zeros(k, b, width, dtype=torch.bool)
        for r, mask in enumerate(masks):
            real = mask.bool()
            rows = real.clone()
            rows[:, 0] = True
            w = self.widths[r]
            index = rows.flatten().nonzero().squeeze(1)  # positions in this replica's (B * L_r)
            counts = rows.sum(dim=1)
            self.indices.append(index)
            self.firsts.append(torch.cumsum(counts, 0) - counts)
            keep[r, :, :w] = real
            dest.append(r * b * width + (index // w) * width + index % w)
        self.counts = [len(i) for i in self.indices]
        self.rows = max(self.counts)
        n = self.rows
        for r, c in enumerate(self.counts):
            src.append(r * n + torch.arange(c))
        self.src = torch.cat(src).to(device)
        self.dest = torch.cat(dest).to(device)
        self.first = torch.cat([r * n + f for r, f in enumerate(self.firsts)]).to(device)
        self.keep = keep.view(k * b, 1, 1, width).to(device)
        self.device = device

    def gather(self, tensors: list[torch.Tensor], fill: int = 0) -> torch.Tensor:
        """(k, N) of each replica's (B, L_r) values at its packed positions, padded with ``fill``."""
        out = torch.full((self.k, self.rows), fill, dtype=tensors[0].dtype)
        for r, (x, index) in enumerate(zip(tensors, self.indices, strict=True)):
            out[r, :len(index)] = x.flatten()[index]
        return out.to(self.device)

    def positions(self) -> torch.Tensor:
        out = torch.zeros(self.k, self.rows, dtype=torch.long)
        for r, (index, w) in enumerate(zip(self.indices, self.widths, strict=True)):
            out[r, :len(index)] = index % w
        return out.to(self.device)

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

    def _drop(self, x: torch.Tensor, p: float, shapes: list[tuple[int, ...]], fit: Any) -> torch.Tensor:
        """Dropout on the stacked ``x``: on CPU replica r's mask is drawn at ``shapes[r]`` (its
        separate run's shape) from its generator and ``fit(r, mask)`` lays it out as x's slice r."""
        if p <= 0.0:
            return x
        if x.device.type != "cpu" or self._gens is None:
            return F.dropout(x, p, True)
        keep = torch.zeros(x.shape, dtype=torch.bool)
        for r, (shape, gen) in enumerate(zip(shapes, self._gens, strict=True)):
            fit(r, _cpu_keep(shape, p, gen), keep[r])
        return _Dropout.apply(x, keep, _cpu_scale(p))  # type: ignore[no-any-return]

    def _embed(self, batches: list[Batch], lay: _Layout) -> torch.Tensor:
        k = lay.k
        pre = f"{self.prefix}.embeddings"
        word = self.param(f"{pre}.word_embeddings.weight")
        types = self.param(f"{pre}.token_type_embeddings.weight")
        pos = self.param(f"{pre}.position_embeddings.weight")
        offset = torch.arange(k, device=lay.device).unsqueeze(1)
        ids = lay.gather([b["input_ids"] for b in batches], self.pad_id)
        tts = lay.gather([b.get("token_type_ids", torch.zeros_like(b["input_ids"])) for b in batches])
        where = lay.positions()
        h = word.shape[-1]
        x = F.embedding(ids + offset * word.shape[1], word.reshape(-1, h))
        x = x + F.embedding(tts + offset * types.shape[1], types.reshape(-1, h))
        x = x + F.embedding(where + offset * pos.shape[1], pos.reshape(-1, h))
        x = self._norm(x, f"{pre}.LayerNorm", self.eps_embed)

        def fit(r: int, mask: torch.Tensor, out: torch.Tensor) -> None:
            index = lay.indices[r]
            out[:len(index)] = mask.view(-1, h).index_select(0, index)

        return self._drop(x, self.p_embed, [(lay.batch, w, h) for w in lay.widths], fit)

    def _attend(self, q: torch.Tensor, kk: torch.Tensor, v: torch.Tensor, lay: _Layout,
                first_only: bool) -> torch.Tensor:
        p = self.p_attn
        if p <= 0.0 or q.device.type != "cpu" or self._gens is None:
            return F.scaled_dot_product_attention(q, kk, v, attn_mask=lay.keep, dropout_p=p,
                                                  scale=self.scaling)
        bias = torch.zeros(lay.keep.shape, dtype=q.dtype).masked_fill_(~lay.keep, torch.finfo(q.dtype).min)
        weights = torch.softmax(torch.matmul(q, kk.transpose(-1, -2)).mul_(self.scaling).add_(bias), dim=-1)
        heads, lq = weights.shape[1], weights.shape[2]
        wide = weights.view(lay.k, lay.batch, heads, lq, lay.width)

        def fit(r: int, mask: torch.Tensor, out: torch.Tensor) -> None:
            w = lay.widths[r]
            out[:, :, :mask.shape[2], :w] = mask

        shapes = [(lay.batch, heads, 1 if first_only else w, w) for w in lay.widths]
        dropped = self._drop(wide, p, shapes, fit)
        return torch.matmul(dropped.view_as(weights), v)

    def _layer(self, i: int, x: torch.Tensor, lay: _Layout, first_only: bool) -> torch.Tensor:
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
        att = self._attend(q, kk, v, lay, first_only)
        att = att.transpose(1, 2).reshape(k * b * q.shape[2], -1)
        att = att.view(k, b, -1) if first_only else lay.pack(att)

        def fit(r: int, mask: torch.Tensor, out: torch.Tensor) -> None:
            out[:mask.shape[0]] = mask

        shapes = [(b, h)] * k if first_only else [(c, h) for c in lay.counts]
        y = self._drop(self._linear(att, f"{pre}.attention.output.dense"), self.p_hidden, shapes, fit)
        y = self._norm(y + src, f"{pre}.attention.output.LayerNorm", self.eps)
        z = self.act(self._linear(y, f"{pre}.intermediate.dense"))
        z = self._drop(self._linear(z, f"{pre}.output.dense"), self.p_out, shapes, fit)
        return self._norm(z + y, f"{pre}.output.LayerNorm", self.eps)

    def forward(self, batches: list[Batch], generators: list[torch.Generator] | None = None) -> torch.Tensor:
        """(k, B) training logits, replica r on ``batches[r]`` (all of one batch size; host tensors,
        laid out on the host and copied to the weights' device once). With ``generators`` (CPU),
        replica r's dropout masks come from ``generators[r]``."""
        self._gens = generators
        try:
            lay = _Layout([b["attention_mask"] for b in batches], self.weights[0].device)
            x = self._embed(batches, lay)
            for i in range(self.layers):
                x = self._layer(i, x, lay, first_only=i == self.layers - 1)
            with torch.autocast(x.device.type, enabled=False):
                pooled = torch.tanh(self._linear(x.float(), f"{self.pool}.dense"))
                pooled = self._drop(pooled, self.p_head, [(lay.batch, pooled.shape[-1])] * lay.k,
                                    lambda r, mask, out: out.copy_(mask))
                return self._linear(pooled, "classifier").squeeze(-1)
        finally:
            self._gens = None
