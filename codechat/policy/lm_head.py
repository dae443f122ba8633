"""The sampled tokens' log-probs straight from the final hidden states: LM head + log-softmax + pick, fused and
computed in blocks of rows x vocabulary columns, so that no (R, V) logits, softmax or gradient is ever held: one
block of ~2^20 values (4 MiB in fp32) at a time, whatever the vocabulary.

    logp, ent = head_logprobs(h, model.lm_head, tok, temperature)   # h (R, C) final-normed, tok (R,)

Blocks: all the rows (up to 4,096 a block) x ~2^20 / rows columns (at least 256): at Qwen's 151,936 tokens, 64
rows go in 10 blocks of 16,384 columns, 512 rows in 75 of 2,048.
Forward, per block: z = (h W_v^T + b_v) / temperature; the running max m, sum s = sum exp(z - m) and (for the
entropy) a = sum exp(z - m) z are rescaled and updated as in an online softmax; the sampled token's logit is
picked in the block that holds it. Then lse = m + log s, logp = z[tok] - lse, entropy = lse - a / s; only lse
(R,) is saved. Backward, per block: z is recomputed (one GEMM), p = exp(z - lse) in place, d z = onehot(tok) g - p g,
then d h += d z W_v and d W_v += d z^T h (d b_v too): each block of d W is written by one GEMM per block of rows.
Compared with materialising the (R, V) logits and their softmax (logprobs.py's `_PickedLogprob`), this costs one
more (R x C x V) GEMM in the backward and saves the passes over (R, V) tensors that do not fit in cache, and
their memory: at Qwen's vocabulary, 2,048 rows of fp32 logits are 1.2 GB, and the softmax and its gradient as
much again each.

Used by `completion_logprobs`' fast path when the head is a plain `nn.Linear` and the logits would be large
(`fusable`: 2^24 or more, or any number of rows at a vocabulary of 2^16 or more); otherwise the (R, V) path runs.

Precision: the GEMMs run in the compute dtype (autocast's when autocast is on, `model.compute_dtype: bfloat16`,
else the weights' dtype), each block of W and of h cast to it as autocast's linear would cast them; the block's
logits, the running max, sums, lse and d z are fp32 whatever the compute dtype; d h and d W are accumulated in
h's and W's own dtypes (fp32 master weights get an fp32 gradient, summed over row blocks in fp32). The values are
then those of autocast's linear followed by an fp32 log-softmax (tests/test_lm_head.py), at a block's memory.

Tied weights (the LM head is the embedding table, as in Qwen's small checkpoints): with a `TiedGrad`, the head's
backward hands d W to it instead of returning it, and the embedding lookup's backward (`tied_embedding`) adds its
rows into that same (V, C) buffer and returns it as the table's one gradient. Autograd would otherwise hold the
head's d W and a second dense (V, C) gradient from the lookup at once, and sum them. The head's backward always
runs first: the lookup's output feeds h, so its gradient waits for d h.

Tests: tests/test_lm_head.py (values, entropies and gradients of h, W and b against the plain ops, fuzzed shapes,
temperatures and block sizes; a gradcheck; the tied gradient against autograd's).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

BLOCK_ELEMS = 1 << 20  # logits per block (4 MiB of fp32): rows x vocabulary columns, reused by every block
BLOCK_MAX_ROWS = 4096  # rows per block at most (then BLOCK_ELEMS / 4096 = 256 columns)
FUSE_MIN_LOGITS = 1 << 24  # rows x vocabulary (64 MiB of fp32 logits) from which the fused path runs: below it the
# (R, V) path is as fast or faster (vs_trl's update, V=1024: fused 0.91-0.99x), above it the memory is what counts
BIG_VOCAB = 1 << 16  # from this vocabulary on the fused path runs at any number of rows: each row's logits,
# softmax and gradient cost 256 KiB or more apiece, and the (R, V) path keeps three or four of them


def blocks_for(rows: int, vocab: int) -> tuple[int, int]:
    """(rows per block, vocabulary columns per block) for R = `rows`: ~BLOCK_ELEMS logits each, all the rows up
    to BLOCK_MAX_ROWS, at least 256 columns (module docstring)."""
    brows = max(1, min(rows, BLOCK_MAX_ROWS))
    return brows, max(1, min(vocab, max(256, BLOCK_ELEMS // brows)))


def fusable(head, h) -> bool:
    """The head is a plain floating-point nn.Linear and the (R, V) logits would hold at least FUSE_MIN_LOGITS
    values or the vocabulary is BIG_VOCAB or more (module docstring); any weight dtype, with or without autocast."""
    V = head.weight.shape[0]
    return ((h.shape[0] * V >= FUSE_MIN_LOGITS or V >= BIG_VOCAB) and type(head) is torch.nn.Linear
            and head.weight.is_floating_point() and h.is_floating_point())


def compute_dtype(w, h) -> torch.dtype:
    """The dtype the head's GEMMs run in: autocast's when it is on for h's device (and W is not already lower),
    else W's."""
    dev = h.device.type
    if torch.is_autocast_enabled(dev) and w.dtype in (torch.float32, torch.float64):
        return torch.get_autocast_dtype(dev)
    return w.dtype


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
                  blocks: tuple[int, int] | None = None, tied: TiedGrad | None = None):
    """h (R, C), tok (R,) -> log-probs (R,) of tok under softmax(head(h) / temperature), and the entropies (R,)
    (detached; zeros when not with_entropy). blocks: (rows, columns) per block (default blocks_for(R, V)).
    tied: d W goes there, for the `tied_embedding` lookup of the same weight to complete (same graph)."""
    brows, cols = blocks or blocks_for(h.shape[0], head.weight.shape[0])
    return _FusedHead.apply(h, head.weight, head.bias, tok, float(temperature), bool(with_entropy),
                            (int(brows), int(cols)), tied, compute_dtype(head.weight, h))


def _stats_dtype(h) -> torch.dtype:
    """The logits' and softmax statistics' dtype: fp32 at least (fp64 stays fp64)."""
    return torch.promote_types(h.dtype, torch.float32)


def _block_logits(h, w, b, temperature: float, buf):
    """(h W^T + b) / temperature (c, v) for a block of rows h (c, C) and of the head's rows w (v, C), b (v,) or
    None, written into buf's first c * v values: one buffer for every block, so the allocator is asked for one
    block per call (not one per block, around which its heap fragments). h is already in the compute dtype; a
    w of another dtype is cast to h's (autocast's cast), and the product lands in buf's (stats) dtype."""
    z = buf[: h.shape[0] * w.shape[0]].view(h.shape[0], w.shape[0])  # (c, v)
    if h.dtype == w.dtype == z.dtype:
        if b is None:
            torch.mm(h, w.t(), out=z)
        else:
            torch.addmm(b, h, w.t(), out=z)
    else:  # lower-precision GEMM (fp32 accumulation inside), its result rounded as autocast's linear rounds it
        z.copy_(torch.mm(h, w.to(h.dtype).t()))
        if b is not None:
            z.add_(b)
    return z.div_(temperature) if temperature != 1.0 else z


def _spans(n: int, size: int):
    return [(i, min(i + size, n)) for i in range(0, n, size)]


class _FusedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, b, tok, temperature, with_entropy, blocks, tied, cd):
        with torch.autocast(h.device.type, enabled=False):  # the casts are explicit (cd), stats stay fp32
            logp, lse, ent = _fused_forward(h, w, b, tok, temperature, with_entropy, blocks, cd)
        ctx.save_for_backward(h, w, b, tok, lse)
        ctx.temperature, ctx.blocks, ctx.tied, ctx.cd = temperature, blocks, tied, cd
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g, _g_ent):
        h, w, b, tok, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        with torch.autocast(h.device.type, enabled=False):
            dh, dw, db = _fused_backward(h, w, b, tok, lse, g, ctx.temperature, ctx.blocks, ctx.cd,
                                         need_h, need_w, need_b)
        if dw is not None and ctx.tied is not None:  # the tied lookup's backward adds its part and returns it
            ctx.tied.grad, dw = dw, None
        return dh, dw, db, None, None, None, None, None, None


def _fused_forward(h, w, b, tok, temperature, with_entropy, blocks, cd):
    """-> logp (R,), lse (R,), entropy (R,) (module docstring), in the stats dtype."""
    (R, _), V, (brows, cols) = h.shape, w.shape[0], blocks
    sd = _stats_dtype(h)
    logp, lse, ent = h.new_empty(R, dtype=sd), h.new_empty(R, dtype=sd), h.new_zeros(R, dtype=sd)  # (R,) each
    buf = h.new_empty(min(brows, R) * min(cols, V), dtype=sd)  # one block of logits
    ebuf = torch.empty_like(buf) if with_entropy else None  # their exp
    for r0, r1 in _spans(R, brows):
        hc, tc = h[r0:r1].to(cd), tok[r0:r1, None]  # (c, C), (c, 1)
        # (c, 1) each: the running max (finite: (m - m_new) * 0 below stays 0), sum exp(z - m) and
        # sum exp(z - m) (z - m), the entropy's, kept relative to m (no cancellation against a large max)
        m = buf.new_full((r1 - r0, 1), torch.finfo(sd).min)
        total, acc = buf.new_zeros(r1 - r0, 1), buf.new_zeros(r1 - r0, 1)
        picked = buf.new_zeros(r1 - r0, 1)  # (c, 1) the sampled token's logit
        for v0, v1 in _spans(V, cols):
            z = _block_logits(hc, w[v0:v1], None if b is None else b[v0:v1], temperature, buf)  # (c, v)
            here = (tc >= v0) & (tc < v1)  # (c, 1) the row's token is in this block
            picked += z.gather(1, (tc - v0).clamp(0, v1 - v0 - 1)) * here
            m_new = torch.maximum(m, z.amax(-1, keepdim=True))  # (c, 1)
            scale = torch.exp(m - m_new)  # (c, 1) rescales what was summed under the old max
            z.sub_(m_new)
            if with_entropy:
                e = torch.exp(z, out=ebuf[: z.numel()].view_as(z))  # (c, v)
                acc = (acc + (m - m_new) * total) * scale + z.mul_(e).sum(-1, keepdim=True)  # product in z
                total = total * scale + e.sum(-1, keepdim=True)
            else:
                total = total * scale + z.exp_().sum(-1, keepdim=True)
            m = m_new
        block_lse = m + total.log()  # (c, 1)
        lse[r0:r1], logp[r0:r1] = block_lse[:, 0], (picked - block_lse)[:, 0]
        if with_entropy:  # lse - sum p z = log total - sum p (z - m)
            ent[r0:r1] = (total.log() - acc / total)[:, 0]
    return logp, lse, ent


def _fused_backward(h, w, b, tok, lse, g, t, blocks, cd, need_h, need_w, need_b):
    """-> d h (R, C) in h's dtype, d W (V, C) in W's, d b (V,) (each None when not needed)."""
    (brows, cols), R, V = blocks, h.shape[0], w.shape[0]
    dh = torch.zeros_like(h) if need_h else None  # (R, C)
    dw = torch.zeros_like(w) if need_w else None  # (V, C)
    db = torch.zeros_like(b) if need_b and b is not None else None  # (V,)
    buf = h.new_empty(min(brows, R) * min(cols, V), dtype=lse.dtype)  # one block of d logits
    exact = cd == h.dtype == w.dtype == lse.dtype  # GEMMs straight into dh, dW; else through cd copies
    for r0, r1 in _spans(R, brows):
        hc, gc, lc, tc = h[r0:r1].to(cd), g[r0:r1, None], lse[r0:r1, None], tok[r0:r1, None]  # (c, C), (c, 1) x3
        for v0, v1 in _spans(V, cols):
            wv = w[v0:v1] if exact else w[v0:v1].to(cd)  # (v, C)
            dz = _block_logits(hc, wv, None if b is None else b[v0:v1], t, buf)  # (c, v)
            dz.sub_(lc).exp_().mul_(-gc)  # -g p: the softmax, recomputed
            here = (tc >= v0) & (tc < v1)  # (c, 1)
            dz.scatter_add_(1, (tc - v0).clamp(0, v1 - v0 - 1), gc * here)  # + g onehot(tok)
            if t != 1.0:
                dz.div_(t)
            if db is not None:
                db[v0:v1] += dz.sum(0).to(db.dtype)
            if exact:
                if dh is not None:
                    dh[r0:r1].addmm_(dz, wv)
                if dw is not None:
                    dw[v0:v1].addmm_(dz.t(), hc)
                continue
            dzc = dz.to(cd)  # (c, v): autocast's backward multiplies in the compute dtype too
            if dh is not None:
                dh[r0:r1] += torch.mm(dzc, wv).to(dh.dtype)
            if dw is not None:
                dw[v0:v1] += torch.mm(dzc.t(), hc).to(dw.dtype)
    return dh, dw, db
