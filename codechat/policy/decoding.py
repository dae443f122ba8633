"""KV-cached decoders behind the sampler: prefill P prompts once, share each prompt's KV with its samples, then
one token per active row per step; finished rows can be dropped.

Two implementations of one small interface (`prefill`, `step`, `select`, and `reuses_kv`):
- `FastDecoder`: the lean forward of fastlm.py (Llama-family models); each prompt's KV kept once and shared by
  its samples, generated KV in a static preallocated cache; can start from a past KV and `export` a row's KV
  (the KV kept across turns, policy/prefix.py).
- `HFDecoder`: any causal LM through its own forward and transformers' `DynamicCache` (the fallback).

Both take left-padded prompts: ids, valid (P, Lp) and `index` (N,), the prompt of each sample row.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from codechat.policy import cattn, packed
from codechat.policy.fastlm import FastLM, unwrap, usable
from codechat.policy.flatkv import FlatCache, flat_ok, lean_step
from codechat.policy.staticstep import StaticStep, bucket, supports, width

FLAT_PROMPT = 512
"""Prompts up to this many columns (padding and a reused past included) decode with the per-row cache of
flatkv.py; longer ones with several samples each keep one copy of the prompt's KV (the shared-prompt grid)."""


def positions(valid):
    """Position ids counting real tokens only: valid (B, L) bool -> (B, L) long."""
    return (valid.long().cumsum(1) - 1).clamp(min=0)


@dataclass
class SharedCache:
    """KV for the fast decoder: each prompt's once, each sample's generated tokens per row."""

    prompt: list
    """Per layer (k, v), each (P, Hkv, Lp, D): the prompts' KV, left-padded."""
    pmask: torch.Tensor
    """(P, 1, 1, Lp) additive mask: 0 on real prompt tokens, -inf on padding."""
    gen: list
    """Per layer (k, v), each (B, Hkv, max_new, D): generated tokens' KV."""
    pidx: torch.Tensor
    """(B,) prompt of each batch row; rows of a prompt are contiguous."""
    slot: torch.Tensor = None
    """(P * gmax,) batch row in each (prompt, sample) grid cell; B (a zero row) where the cell is empty."""
    flat: torch.Tensor = None
    """(B,) grid cell of each batch row."""
    gmax: int = 0
    """Grid width: the most rows any prompt has."""
    gstart: torch.Tensor = None
    """(B,) first generated-cache column of each row (rows added mid-decode start later); None = all at 0."""

    def regrid(self) -> None:
        B, P = self.pidx.numel(), self.prompt[0][0].shape[0]
        counts = torch.bincount(self.pidx, minlength=P)  # (P,)
        self.gmax = int(counts.max()) if B else 0  # B = 0: every row finished, the next prompt not yet added
        first = counts.cumsum(0) - counts  # (P,) first row of each prompt
        rank = torch.arange(B, device=self.pidx.device) - first[self.pidx]  # (B,)
        self.flat = self.pidx * self.gmax + rank
        self.slot = torch.full((P * self.gmax,), B, dtype=torch.long, device=self.pidx.device)
        self.slot[self.flat] = torch.arange(B, device=self.pidx.device)


class FastDecoder:
    def __init__(self, fast: FastLM, compiled: bool = False, pack: bool = False, native: bool = False):
        self.fast = fast
        self.compiled = compiled
        """Per-row cache steps run staticstep's compiled static-shape step (sampling.compile)."""
        self.pack = pack
        """The lean step's matmuls run on weights packed for oneDNN (packed.py; sampling.packed_weights) where
        they apply."""
        self.flat: FlatCache | None = None
        """The per-row cache (flatkv.py) when this batch uses it, else None (the shared-prompt grid)."""
        self.lean = False
        """The shared-prompt grid's steps run flatkv.lean_step (fused weights, no autocast, ...)."""
        self.native = native
        """Lean steps may attend through the C kernel of cattn.py (sampling.native_kernels) where it builds."""
        self.kernel = False
        """This batch's lean steps attend through cattn.py over the shared-prompt grid."""
        self._version, self._checked = 0, -1  # the grid's tensors change with each version; cattn checked one

    reuses_kv = True
    """`prefill` can start from a past KV (policy/prefix.py)."""

    def prefill(self, ids, valid, index, max_new: int, past=None):
        """Returns next-token logits (N, V) for every sample row. past: None, or (per layer (k, v) each
        (P, Hkv, S, D), valid (P, S) bool): the KV of tokens that come before each row of ids (left-padded)."""
        pos = positions(valid)  # (P, Lp)
        if past is not None:
            pos = pos + past[1].long().sum(1, keepdim=True)
        h, kv = self.fast.forward(ids, pos, valid, *(past or (None, None)))  # h (P, Lp, C); kv (P, Hkv, Lp, D)
        logits = self.fast.logits(h[:, -1])  # (P, V): left padding puts every last real token in the last column
        if past is not None:  # the decoder's "prompt" KV is the past followed by what was just prefilled
            kv = [(torch.cat([pk, k], 2), torch.cat([pv, v], 2)) for (pk, pv), (k, v) in zip(past[0], kv)]
            valid = torch.cat([past[1], valid], 1)  # (P, S + Lp)
        self.pos = valid.long().sum(1)[index]  # (N,) position of the next token
        self.t = 0  # generated-cache column of the next token
        dtype = kv[0][0].dtype
        one_each = bool((torch.bincount(index) <= 1).all())
        self.lean = flat_ok(self.fast, ids.device) or self._bf16_lean(ids.device, index.numel(), max_new)
        self.kernel = (self.lean and self.native and not self.compiled and kv[0][0].dtype == torch.float32
                       and cattn.usable(self.fast.head_dim, ids.device))
        vdt = packed.compute_dtype(ids.device) if self.kernel else kv[0][0].dtype  # the cache's v dtype
        if self.lean:  # autocast's v is bf16, its k fp32: v kept in bf16 for the C kernel (it reads bf16 values),
            kv = [(k, v.to(vdt)) for k, v in kv]  # else in fp32 (exact either way), as its attention reads them
        if self.lean and not self.kernel and (valid.shape[1] <= FLAT_PROMPT or one_each):
            static = StaticStep(self.fast, compiled=True) if self.compiled and supports(self.fast) else None
            if static is not None:  # whole buckets of columns, so later batches reuse the graph
                max_new = width(valid.shape[1] + max_new) - valid.shape[1]
            self.flat = FlatCache.build(kv, valid, index, max_new, self.fast.n_kv, static)
            self._pack(index.numel(), max_new, ids.device)
            return logits[index]
        self.flat = None
        self._version += 1
        pmask = torch.zeros(valid.shape, dtype=dtype, device=ids.device).masked_fill(~valid, float("-inf"))
        self.cache = SharedCache(
            prompt=[(k.contiguous(), v.contiguous()) for k, v in kv], pmask=pmask[:, None, None, :],
            gen=self._gen_cache(index.numel(), max_new, dtype, vdt, ids.device), pidx=index.clone())
        self.cache.regrid()
        self._pack(index.numel(), max_new, ids.device)
        return logits[index]

    def _gen_cache(self, rows: int, columns: int, dtype, vdt, device) -> list:
        """Per layer (k, v), each (rows, Hkv, columns, D). The C kernel reads only columns it has written (a row's
        gstart..t), so its cache is left unfilled, its v in vdt; the torch ops read zeros where nothing was."""
        if not self.kernel:
            return self.fast.new_cache(rows, columns, dtype, device)
        shape = (rows, self.fast.n_kv, columns, self.fast.head_dim)
        return [(torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=vdt, device=device))
                for _ in self.fast.inner.layers]

    def _bf16_lean(self, device, rows: int, max_new: int) -> bool:
        """Inside bf16 autocast the lean step runs only on bf16 packed weights (packed.py), never compiled."""
        return (self.pack and not self.compiled and packed.compute_dtype(device) == torch.bfloat16
                and packed.usable(self.fast, device, rows, max_new) and flat_ok(self.fast, device, autocast_ok=True))

    def _pack(self, rows: int, max_new: int, device) -> None:
        """Packed weights for the lean steps of this call (not the compiled step: inductor has its own)."""
        static = self.flat is not None and self.flat.static is not None
        use = self.pack and self.lean and not static and packed.usable(self.fast, device, rows, max_new)
        dt = packed.compute_dtype(device)
        self.fast.packed = packed.PackedWeights.build(self.fast, dt) if use else None

    def rows_for(self, n_live: int) -> int:
        """Rows to keep when n_live rows are still decoding: n_live, or its bucket for a static-shape step."""
        return bucket(n_live) if self.flat is not None and self.flat.static is not None else n_live

    def step(self, tok):
        """tok (B,) -> logits (B, V)."""
        pk = self.fast.packed
        if pk is not None and pk.dtype != torch.float32:  # the lean step gives each op its dtype itself
            with torch.autocast(tok.device.type, enabled=False):
                return self._step(tok)
        return self._step(tok)

    def _step(self, tok):
        if self.flat is not None:
            logits = self.flat.step(self.fast, tok, self.pos, self.t)
        elif self.kernel:
            logits = lean_step(self.fast, tok, self.pos, self._attend_kernel, raw=True)
        elif self.lean:
            logits = lean_step(self.fast, tok, self.pos, self._attend_grid)
        else:
            logits = self.fast.decode(tok, self.pos, self.cache, self.t)
        self.pos = self.pos + 1
        self.t += 1
        return logits

    def _attend_grid(self, i, q, k, v):
        """The shared-prompt grid's attention for lean_step: q (B, H, D), k and v (B, Hkv, D) -> (B, H * D)."""
        c, t = self.cache, self.t
        gk, gv = c.gen[i]
        gk[:, :, t], gv[:, :, t] = k, v
        o = self.fast._attend_shared(q[:, :, None], c.prompt[i], gk[:, :, : t + 1], gv[:, :, : t + 1], c)
        return o.view(q.shape[0], -1)

    def _attend_kernel(self, i, qkv, rope):
        """The shared-prompt grid's attention in C (cattn.py): the rotary, this step's k, v into the cache at
        column t, and attention over each row's prompt and its generated columns only -> (B, H * D)."""
        c = self.cache
        o = cattn.attend(qkv, self.fast.n_heads, self.fast.n_kv, rope, c.prompt[i], c.pmask.view(c.pmask.shape[0], -1),
                         c.gen[i], self.t, c.gstart, c.pidx, self.fast.scaling,
                         cache_checked=self._checked == self._version,
                         out_dtype=self.fast.packed.dtype if self.fast.packed is not None else torch.float32)
        if i == len(c.gen) - 1:  # every layer's cache tensors checked: only qkv, rope and t until the cache changes
            self._checked = self._version
        return o

    def export(self, b: int, n_gen: int) -> list:
        """Batch row b's KV: its prompt's real tokens, then its first n_gen generated tokens; per layer (k, v)
        each (Hkv, S, D). Copies, so later steps and `select` leave it alone."""
        if self.flat is not None:
            return self.flat.export(b, n_gen)
        c = self.cache
        real = c.pmask[c.pidx[b], 0, 0] == 0  # (Lp,) bool
        return [(torch.cat([pk[c.pidx[b]][:, real], gk[b, :, :n_gen]], 1),
                 torch.cat([pv[c.pidx[b]][:, real], gv[b, :, :n_gen]], 1))
                for (pk, pv), (gk, gv) in zip(c.prompt, c.gen)]

    def add(self, ids, valid, n: int):
        """Continuous batching: append one prompt, ids and valid (1, L), with n sample rows after the current
        ones; they attend to their prompt and to generated columns from now on only (`gstart`). Returns their
        next-token logits (n, V)."""
        h, kv = self.fast.forward(ids, positions(valid), valid)  # h (1, L, C); kv per layer (1, Hkv, L, D)
        logits = self.fast.logits(h[:, -1])  # (1, V)
        self.pos = torch.cat([self.pos, torch.full((n,), int(valid.sum()), dtype=torch.long, device=ids.device)])
        if self.flat is not None:
            self.flat.add(kv, valid, n, self.t)
            return logits.expand(n, -1)
        c = self.cache
        self._version += 1
        Lp, L = c.pmask.shape[-1], ids.shape[1]
        W = max(Lp, L)  # left-pad the shorter side: padded columns get -inf in pmask, so nothing changes
        lpad = lambda x, w: torch.cat([x.new_zeros(*x.shape[:2], w - x.shape[2], x.shape[3]), x], 2)  # noqa: E731
        c.prompt = [(torch.cat([lpad(pk, W), lpad(k, W)]), torch.cat([lpad(pv, W), lpad(v, W)]))
                    for (pk, pv), (k, v) in zip(c.prompt, kv)]
        new_mask = torch.zeros((1, 1, 1, L), dtype=c.pmask.dtype, device=ids.device).masked_fill(
            ~valid[:, None, None, :], float("-inf"))
        pm = lambda m, w: torch.cat([m.new_full((*m.shape[:3], w - m.shape[3]), float("-inf")), m], 3)  # noqa: E731
        c.pmask = torch.cat([pm(c.pmask, W), pm(new_mask, W)])
        B, P = c.pidx.numel(), c.prompt[0][0].shape[0]
        c.gen = [(torch.cat([k, k.new_zeros(n, *k.shape[1:])]), torch.cat([v, v.new_zeros(n, *v.shape[1:])]))
                 for k, v in c.gen]
        start = c.gstart if c.gstart is not None else torch.zeros(B, dtype=torch.long, device=ids.device)
        c.gstart = torch.cat([start, torch.full((n,), self.t, dtype=torch.long, device=ids.device)])
        c.pidx = torch.cat([c.pidx, torch.full((n,), P - 1, dtype=torch.long, device=ids.device)])
        c.regrid()
        return logits.expand(n, -1)

    def grow(self, extra: int) -> None:
        """Make room for `extra` more generated columns (rows added mid-decode run past the first budget)."""
        if self.flat is not None:
            return self.flat.grow(extra)
        self._version += 1
        self.cache.gen = [(torch.cat([k, k.new_zeros(*k.shape[:2], extra, k.shape[3])], 2),
                           torch.cat([v, v.new_zeros(*v.shape[:2], extra, v.shape[3])], 2)) for k, v in self.cache.gen]

    @property
    def columns(self) -> int:
        if self.flat is not None:
            return self.flat.columns
        return self.cache.gen[0][0].shape[2]

    def select(self, rows):
        """Keep only batch rows `rows` (B',), and only the prompts they use; copies the filled part of the cache."""
        self.pos = self.pos[rows]
        if self.flat is not None:
            return self.flat.select(rows, self.t)
        c, t = self.cache, self.t
        self._version += 1
        used, pidx = torch.unique(c.pidx[rows], return_inverse=True)
        c.prompt = [(k[used], v[used]) for k, v in c.prompt]
        c.pmask, c.pidx = c.pmask[used], pidx
        new = []
        for k, v in c.gen:
            nk, nv = k.new_empty((rows.numel(), *k.shape[1:])), v.new_empty((rows.numel(), *v.shape[1:]))
            nk[:, :, :t] = k[rows, :, :t]
            nv[:, :, :t] = v[rows, :, :t]
            new.append((nk, nv))
        c.gen = new
        c.gstart = c.gstart[rows] if c.gstart is not None else None
        c.regrid()


class HFDecoder:
    reuses_kv = False
    """Always prefills the whole prompt (the sampler ignores stored KV for it)."""

    def __init__(self, model):
        self.model = model
        params = inspect.signature(unwrap(model).forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"

    def _run(self, ids, mask, pos, cache):
        kw = {self.cache_kw: cache} if cache is not None else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1], cache  # (B, V)

    def prefill(self, ids, valid, index, max_new: int, past=None):
        if past is not None:
            raise ValueError("HFDecoder: no past KV (reuses_kv is False)")
        logits, self.cache = self._run(ids, valid.long(), positions(valid), None)
        self.cache.batch_select_indices(index)
        self.mask = valid[index].long()  # (N, Lp), grows by one column per step
        self.pos = valid.long().sum(1)[index]
        return logits[index]

    def step(self, tok):
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.mask.shape[0], 1)], dim=1)
        logits, self.cache = self._run(tok[:, None], self.mask, self.pos[:, None], self.cache)
        self.pos = self.pos + 1
        return logits

    def rows_for(self, n_live: int) -> int:
        """Rows to keep when n_live rows are still decoding: all of them."""
        return n_live

    def select(self, rows):
        self.cache.batch_select_indices(rows)
        self.mask = self.mask[rows]
        self.pos = self.pos[rows]


def make_decoder(model, fast: bool | None = None, compiled: bool = False, pack: bool = False,
                 native: bool = False):
    """FastDecoder (with fused weights when possible) when `fast` is None and fastlm.usable(model) or when fast
    is True; else HFDecoder. compiled: the FastDecoder's per-row cache steps run compiled (sampling.compile);
    pack: its lean steps' matmuls run on oneDNN-packed weights where they apply (sampling.packed_weights);
    native: its lean steps attend through cattn.py's C kernel where it builds (sampling.native_kernels)."""
    if fast or (fast is None and usable(model)):
        lm = FastLM(model)
        lm.fuse()
        return FastDecoder(lm, compiled, pack, native)
    return HFDecoder(model)
