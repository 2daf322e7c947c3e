"""A tiny decoder-only transformer over a paged KV cache (a pool of fixed-size blocks), run one
engine step at a time on a flat batch of prefill-chunk and decode tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

MAX_POS = 2048


@dataclass
class StepBatch:
    """One step's members, flattened, decode tokens first: tokens[n] at positions[n] are
    written to KV slot slots[n]. Masks are additive (0 / -inf), built once per step."""

    tokens: torch.Tensor  # [N] long
    positions: torch.Tensor  # [N] long
    slots: torch.Tensor  # [N] long, flat KV slot of each token
    n_dec: int  # rows 0..n_dec-1 are the decode tokens
    dec_ctx: torch.Tensor  # [Bd, Tmax] KV slots of each decode member's context (padded)
    dec_bias: torch.Tensor  # [Bd, 1, 1, Tmax] float
    prefills: list[tuple[int, torch.Tensor, torch.Tensor | None]]  # (rows, ctx slots, bias)
    sample_rows: torch.Tensor  # [S] indices into N whose logits are sampled


class TinyLM(torch.nn.Module):
    """Weights as plain tensors with pre-transposed matrices, so each projection is one addmm:
    fewer profiler events per step than nn.Linear's decomposition."""

    def __init__(self, d: int, layers: int, heads: int, vocab: int, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.d, self.heads, self.vocab = d, heads, vocab

        def w(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, generator=g) * shape[0] ** -0.5)

        self.emb = w(vocab, d)
        self.pos = w(MAX_POS, d)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            m = torch.nn.Module()
            m.ln1 = torch.nn.LayerNorm(d)
            m.wqkv, m.bqkv = w(d, 3 * d), torch.nn.Parameter(torch.zeros(3 * d))
            m.wo, m.bo = w(d, d), torch.nn.Parameter(torch.zeros(d))
            m.ln2 = torch.nn.LayerNorm(d)
            m.w1, m.b1 = w(d, 4 * d), torch.nn.Parameter(torch.zeros(4 * d))
            m.w2, m.b2 = w(4 * d, d), torch.nn.Parameter(torch.zeros(d))
            self.layers.append(m)
        self.ln_f = torch.nn.LayerNorm(d)
        self.w_out = w(d, vocab)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits of the sampled rows [S, d] -> [S, vocab] (what torch.compile wraps)."""
        return torch.mm(self.ln_f(h), self.w_out)


class KVPool:
    """The KV budget: `blocks` blocks of `block_size` slots per layer, handed out by block id."""

    def __init__(self, blocks: int, block_size: int, layers: int, heads: int, dh: int) -> None:
        self.block_size = block_size
        self.k = torch.zeros(layers, blocks * block_size, heads, dh)
        self.v = torch.zeros(layers, blocks * block_size, heads, dh)
        self.free = list(range(blocks - 1, -1, -1))
        self.total = blocks

    def clear(self, blocks: list[int]) -> None:
        """Zero freed blocks' contents (a recomputed sequence must not see stale KV)."""
        if blocks:
            idx = torch.tensor(blocks)
            bs = self.block_size
            rows = (idx[:, None] * bs + torch.arange(bs)).flatten()
            self.k.index_fill_(1, rows, 0.0)
            self.v.index_fill_(1, rows, 0.0)


def forward(model: TinyLM, pool: KVPool, batch: StepBatch, heavy_decode: bool) -> torch.Tensor:
    """Hidden states of the rows to sample [S, d]; writes every token's K/V into the pool.
    heavy_decode: decode attention one sequence at a time with a materialised score matrix
    (an unbatched kernel) instead of one batched SDPA call."""
    d, h = model.d, model.heads
    dh = d // h
    nd = batch.n_dec
    x = model.emb[batch.tokens] + model.pos[batch.positions]
    n = x.shape[0]
    for li, m in enumerate(model.layers):
        q, k, v = torch.addmm(m.bqkv, m.ln1(x), m.wqkv).view(n, 3, h, dh).unbind(1)
        kc, vc = pool.k[li], pool.v[li]
        kc.index_copy_(0, batch.slots, k)
        vc.index_copy_(0, batch.slots, v)
        parts: list[torch.Tensor] = []
        if nd and heavy_decode:
            for b in range(nd):
                ctx = batch.dec_ctx[b][batch.dec_bias[b, 0, 0] == 0]
                kb, vb = kc[ctx].transpose(0, 1), vc[ctx].transpose(0, 1)  # [h, T, dh]
                att = torch.softmax(torch.bmm(q[b : b + 1].transpose(0, 1), kb.transpose(1, 2))
                                    * dh**-0.5, -1)  # fmt: skip
                parts.append(torch.bmm(att, vb).transpose(0, 1))  # [1, h, dh]
        elif nd:
            kd = kc[batch.dec_ctx].transpose(1, 2)  # [Bd, h, T, dh]
            vd = vc[batch.dec_ctx].transpose(1, 2)
            qd = q[:nd].unsqueeze(2)  # [Bd, h, 1, dh]
            parts.append(
                F.scaled_dot_product_attention(qd, kd, vd, attn_mask=batch.dec_bias)[:, :, 0]
            )
        row = nd
        for rows, ctx, bias in batch.prefills:
            qp = q[row : row + rows].transpose(0, 1).unsqueeze(0)  # [1, h, rows, dh]
            kp = kc[ctx].transpose(0, 1).unsqueeze(0)
            vp = vc[ctx].transpose(0, 1).unsqueeze(0)
            # A whole prompt is causal; a later chunk also sees the context cached before it.
            a = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=bias, is_causal=bias is None)
            parts.append(a[0].transpose(0, 1))
            row += rows
        att_out = parts[0] if len(parts) == 1 else torch.cat(parts)
        x = x + torch.addmm(m.bo, att_out.reshape(n, d), m.wo)
        x = x + torch.addmm(m.b2, F.gelu(torch.addmm(m.b1, m.ln2(x), m.w1)), m.w2)
    return x[batch.sample_rows]
