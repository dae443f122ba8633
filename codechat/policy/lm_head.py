"""The sampled tokens' log-probs straight from the final hidden states: LM head + log-softmax + pick, fused and
chunked over rows, so that no (R, V) logits, softmax or gradient is ever held beyond one chunk of rows.

    logp, ent = head_logprobs(h, model.lm_head, tok, temperature)   # h (R, C) final-normed, tok (R,)

Forward, per chunk of rows: z = (h W^T + b) / temperature, lse = logsumexp(z), logp = z[tok] - lse and, when asked,
the entropy lse - sum(softmax(z) * z); only lse (R,) is saved. Backward, per chunk: z is recomputed (one GEMM),
p = exp(z - lse) in place, d z = onehot(tok) g - p g, then d h = d z W and d W += d z^T h (d b += sum d z) from
that chunk. Compared with materialising the (R, V) logits and their softmax (logprobs.py's `_PickedLogprob`),
this costs one more (R x C x V) GEMM in the backward and saves the passes over (R, V) tensors that do not fit in
cache, and their memory: at Qwen's 152k vocabulary, 2,048 rows of fp32 logits are 1.2 GB, and the softmax and its
gradient as much again each.

Used by `completion_logprobs`' fast path when the head is a plain fp32 `nn.Linear`, no autocast is active and
the logits would be large (`fusable`: 2^24 or more, or any number of rows at a vocabulary of 2^16 or more);
otherwise the (R, V) path runs. Chunks hold ~2^18 logits and at least 256 rows, but at most ~2^22 logits (16 MiB)
when that leaves 32 rows or more: at Qwen's vocabulary 32 rows (19 MB) where 256 rows were 155 MB.

Tied weights (the LM head is the embedding table, as in Qwen's small checkpoints): with a `TiedGrad`, the head's
backward hands d W to it instead of returning it, and the embedding lookup's backward (`tied_embedding`) adds its
rows into that same (V, C) buffer and returns it as the table's one gradient. Autograd would otherwise hold the
head's d W and a second dense (V, C) gradient from the lookup at once, and sum them. The head's backward always
runs first: the lookup's output feeds h, so its gradient waits for d h.

Tests: tests/test_lm_head.py (values, entropies and gradients of h, W and b against the plain ops, fuzzed shapes,
temperatures and chunk sizes; a gradcheck; the tied gradient against autograd's).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_ELEMS = 1 << 18  # logits per chunk (1 MiB in fp32): rows x vocabulary stays in cache
CHUNK_MAX_ELEMS = 1 << 22  # at most this many (16 MiB) where that leaves 32 rows: a large vocabulary's chunk
# stays small (at V=151,936 and 512 rows, 32-row chunks ran the head's forward + backward in 0.45x the time of
# 256-row ones, 1 thread)
FUSE_MIN_LOGITS = 1 << 24  # rows x vocabulary (64 MiB of fp32 logits) from which the fused path runs: below it the
# (R, V) path is as fast or faster (vs_trl's update, V=1024: fused 0.91-0.99x), above it the memory is what counts
BIG_VOCAB = 1 << 16  # from this vocabulary on the fused path runs at any number of rows: each row's logits,
# softmax and gradient cost 256 KiB or more apiece, and the (R, V) path keeps three or four of them


def chunk_rows(vocab: int) -> int:
    """Rows per chunk for a vocabulary: ~CHUNK_ELEMS logits and at least 256 rows, but no more than
    CHUNK_MAX_ELEMS logits unless that is under 32 rows (see the module docstring)."""
    v = max(vocab, 1)
    return min(max(256, CHUNK_ELEMS // v), max(32, CHUNK_MAX_ELEMS // v))


def fusable(head, h) -> bool:
    """The head is a plain fp32 nn.Linear on fp32 states, no autocast is on (the fused path's exact case), and the
    (R, V) logits would hold at least FUSE_MIN_LOGITS values or the vocabulary is BIG_VOCAB or more."""
    V = head.weight.shape[0]
    return ((h.shape[0] * V >= FUSE_MIN_LOGITS or V >= BIG_VOCAB) and type(head) is torch.nn.Linear
            and head.weight.dtype == torch.float32 and h.dtype == torch.float32
            and not torch.is_autocast_enabled(h.device.type))


class TiedGrad:
    """Carries the LM head's weight gradient to the lookup of the same (tied) table (module docstring)."""

    def __init__(self):
        self.grad = None  # (V, C) d W of the head, set by its backward, taken by the lookup's


def tied_embedding(ids, emb: torch.nn.Embedding, tied: TiedGrad):
    """emb(ids) (..., C), whose table gradient is added into the head's d W held by `tied` (module docstring)."""
    return _TiedLookup.apply(ids, emb.weight, emb.padding_idx, tied)


class _TiedLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, w, padding_idx, tied):
        ctx.save_for_backward(ids)
        ctx.padding_idx, ctx.tied, ctx.shape = padding_idx, tied, w.shape
        return F.embedding(ids, w, padding_idx)

    @staticmethod
    def backward(ctx, g):
        (ids,) = ctx.saved_tensors
        dw, ctx.tied.grad = ctx.tied.grad, None
        if dw is None:  # the head ran the (R, V) path or did not need d W: the lookup's part alone
            dw = g.new_zeros(ctx.shape)
        ids, g = ids.flatten(), g.reshape(-1, ctx.shape[1])  # (n,), (n, C)
        if ctx.padding_idx is not None:  # nn.Embedding gives its padding row no gradient
            keep = ids != ctx.padding_idx
            ids, g = ids[keep], g[keep]
        return None, dw.index_add_(0, ids, g), None, None


def head_logprobs(h, head: torch.nn.Linear, tok, temperature: float = 1.0, with_entropy: bool = True,
                  rows: int | None = None, tied: TiedGrad | None = None):
    """h (R, C), tok (R,) -> log-probs (R,) of tok under softmax(head(h) / temperature), and the entropies (R,)
    (detached; zeros when not with_entropy). rows: rows per chunk (default chunk_rows(V)). tied: d W goes there,
    for the `tied_embedding` lookup of the same weight to complete (it must be in the same graph)."""
    rows = rows or chunk_rows(head.weight.shape[0])
    return _FusedHead.apply(h, head.weight, head.bias, tok, float(temperature), bool(with_entropy), int(rows), tied)


def _logits(h, w, b, temperature: float, buf):
    """(h W^T + b) / temperature (c, V), written into the first c rows of buf: one buffer reused by every chunk,
    so the allocator is not asked for (and does not fragment its heap around) a new block per chunk."""
    z = buf[: h.shape[0]]  # (c, V)
    if b is None:
        torch.mm(h, w.t(), out=z)
    else:
        torch.addmm(b, h, w.t(), out=z)
    return z.div_(temperature) if temperature != 1.0 else z


class _FusedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, b, tok, temperature, with_entropy, rows, tied):
        R = h.shape[0]
        logp, lse, ent = h.new_empty(R), h.new_empty(R), h.new_zeros(R)  # (R,) each
        buf = h.new_empty(min(rows, R), w.shape[0])  # (rows, V) the chunks' logits
        ebuf = torch.empty_like(buf) if with_entropy else None  # (rows, V) their exp
        for s in range(0, R, rows):
            z = _logits(h[s : s + rows], w, b, temperature, buf)  # (c, V)
            picked = z.gather(1, tok[s : s + rows, None])[:, 0]  # (c,)
            mx = z.amax(-1, keepdim=True)  # (c, 1)
            z.sub_(mx)  # in place from here on: one (c, V) buffer, two with the entropy
            if with_entropy:
                e = torch.exp(z, out=ebuf[: z.shape[0]])  # (c, V)
                total = e.sum(-1)  # (c,)
                # entropy = log total - sum(e * (z - max)) / total; the product in z's buffer (z is not read again)
                ent[s : s + rows] = total.log() - z.mul_(e).sum(-1) / total
            else:
                total = z.exp_().sum(-1)  # (c,)
            m = mx[:, 0] + total.log()  # (c,) logsumexp
            lse[s : s + rows] = m
            logp[s : s + rows] = picked - m
        ctx.save_for_backward(h, w, b, tok, lse)
        ctx.temperature, ctx.rows, ctx.tied = temperature, rows, tied
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g, _g_ent):
        h, w, b, tok, lse = ctx.saved_tensors
        t, rows = ctx.temperature, ctx.rows
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        dh = torch.empty_like(h) if need_h else None  # (R, C)
        dw = torch.zeros_like(w) if need_w else None  # (V, C)
        db = torch.zeros_like(b) if need_b and b is not None else None  # (V,)
        buf = h.new_empty(min(rows, h.shape[0]), w.shape[0])  # (rows, V) the chunks' d logits
        for s in range(0, h.shape[0], rows):
            hc, gc = h[s : s + rows], g[s : s + rows]  # (c, C), (c,)
            dz = _logits(hc, w, b, t, buf).sub_(lse[s : s + rows, None]).exp_()  # (c, V) the softmax, recomputed
            dz.mul_(-gc[:, None]).scatter_add_(1, tok[s : s + rows, None], gc[:, None])  # d logp / d z
            if t != 1.0:
                dz.div_(t)
            if dh is not None:
                torch.mm(dz, w, out=dh[s : s + rows])
            if dw is not None:
                dw.addmm_(dz.t(), hc)
            if db is not None:
                db += dz.sum(0)
        if dw is not None and ctx.tied is not None:  # the tied lookup's backward adds its part and returns it
            ctx.tied.grad, dw = dw, None
        return dh, dw, db, None, None, None, None, None
