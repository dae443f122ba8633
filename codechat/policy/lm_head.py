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
the logits would be large (`fusable`: 2^24 or more); otherwise the (R, V) path runs. Tests: tests/test_lm_head.py
(values, entropies and gradients of h, W and b against the plain ops, fuzzed shapes, temperatures and chunk
sizes; a gradcheck).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_ELEMS = 1 << 18  # logits per chunk (1 MiB in fp32): rows x vocabulary stays in cache
FUSE_MIN_LOGITS = 1 << 24  # rows x vocabulary (64 MiB of fp32 logits) from which the fused path runs: below it the
# (R, V) path is as fast or faster (vs_trl's update, V=1024: fused 0.91-0.99x), above it the memory is what counts


def chunk_rows(vocab: int) -> int:
    """Rows per chunk for a vocabulary: ~CHUNK_ELEMS logits, at least 256 rows (see the module docstring)."""
    return max(256, CHUNK_ELEMS // max(vocab, 1))


def fusable(head, h) -> bool:
    """The head is a plain fp32 nn.Linear on fp32 states, no autocast is on (the fused path's exact case), and the
    (R, V) logits would hold at least FUSE_MIN_LOGITS values."""
    return (h.shape[0] * head.weight.shape[0] >= FUSE_MIN_LOGITS and type(head) is torch.nn.Linear and head.weight.dtype == torch.float32 and h.dtype == torch.float32
            and not torch.is_autocast_enabled(h.device.type))


def head_logprobs(h, head: torch.nn.Linear, tok, temperature: float = 1.0, with_entropy: bool = True,
                  rows: int | None = None):
    """h (R, C), tok (R,) -> log-probs (R,) of tok under softmax(head(h) / temperature), and the entropies (R,)
    (detached; zeros when not with_entropy). rows: rows per chunk (default chunk_rows(V))."""
    rows = rows or chunk_rows(head.weight.shape[0])
    return _FusedHead.apply(h, head.weight, head.bias, tok, float(temperature), bool(with_entropy), int(rows))


def _logits(h, w, b, temperature: float):
    z = F.linear(h, w, b)  # (c, V)
    return z / temperature if temperature != 1.0 else z


class _FusedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, b, tok, temperature, with_entropy, rows):
        R = h.shape[0]
        logp, lse, ent = h.new_empty(R), h.new_empty(R), h.new_zeros(R)  # (R,) each
        for s in range(0, R, rows):
            z = _logits(h[s : s + rows], w, b, temperature)  # (c, V)
            m = torch.logsumexp(z, dim=-1)  # (c,)
            lse[s : s + rows] = m
            logp[s : s + rows] = z.gather(1, tok[s : s + rows, None])[:, 0] - m
            if with_entropy:
                p = torch.exp(z - m[:, None])  # (c, V)
                ent[s : s + rows] = m - (p * z).sum(-1)
        ctx.save_for_backward(h, w, b, tok, lse)
        ctx.temperature, ctx.rows = temperature, rows
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
        for s in range(0, h.shape[0], rows):
            hc, gc = h[s : s + rows], g[s : s + rows]  # (c, C), (c,)
            dz = _logits(hc, w, b, t).sub_(lse[s : s + rows, None]).exp_()  # (c, V) the softmax, recomputed
            dz.mul_(-gc[:, None]).scatter_add_(1, tok[s : s + rows, None], gc[:, None])  # d logp / d z
            if t != 1.0:
                dz.div_(t)
            if dh is not None:
                torch.mm(dz, w, out=dh[s : s + rows])
            if dw is not None:
                dw.addmm_(dz.t(), hc)
            if db is not None:
                db += dz.sum(0)
        return dh, dw, db, None, None, None, None
