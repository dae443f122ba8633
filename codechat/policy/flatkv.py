"""The lean one-token decode step over a per-row KV cache (short prompts, or one sample per prompt).

Why: at the presets' sizes a decode step's matrices are small (32 rows x a few hundred columns), so every op
costs about as much as the arithmetic it launches. This step does per layer one fused RMSNorm, the fused q/k/v
projection, rotary as multiply-add with a rolled copy (`roll(x) * sin'` equals `rotate_half(x) * sin` with the
first half of sin negated), two cache writes, attention as `baddbmm` (scale and mask fused) + softmax + `bmm`,
the output projection fused with its residual add (`addmm`), and the SwiGLU MLP as one projection, silu * up and
`addmm`: 15 ops where the shared-prompt grid path (fastlm.py `decode`) takes ~60.

The cache holds, per row, its prompt's KV (left-padded to the prompt region's width W) followed by its generated
tokens' KV: (B, Hkv, W + A, D) per layer, A generated columns allocated CHUNK at a time (the compiled step:
all at once). One additive mask (B * Hkv, 1, W + A) says which columns a row may read (-inf on prompt padding, on
generated columns before a row's start when it joined mid-decode, and on columns not yet written). Attention
reads the whole allocation: one contiguous operand per layer, which `bmm` runs as one batched product (a slice
of a wider buffer runs as one small product per batch entry, slower than the closed columns it skips).
Each prompt's KV is copied once per sample: what the shared-prompt grid saves on long prompts with many samples,
and why the decoder uses this layout only for short prompts or one sample per prompt (decoding.py).

Applies to fp32/bf16/fp16 models with fused weights (FastLM.fuse), no q/k norm, no o_proj bias, no autocast.
The same math as the model's forward up to float rounding (tests/test_sampler.py compares the logits).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from codechat.policy import cattn



def flat_ok(fast, device, autocast_ok: bool = False) -> bool:
    """The lean step applies to this FastLM (fused, plain RMSNorms, no q/k norm, no o_proj bias; no autocast unless
    autocast_ok: bf16 packed weights, packed.py)."""
    if fast.fused is None or fast.qk_norm or (torch.is_autocast_enabled(torch.device(device).type) and not autocast_ok):
        return False
    for layer in fast.inner.layers:
        if layer.self_attn.o_proj.bias is not None or type(layer.self_attn.o_proj) is not torch.nn.Linear:
            return False
        if type(layer.mlp.down_proj) is not torch.nn.Linear or layer.mlp.down_proj.bias is not None:
            return False
    norms = [m for layer in fast.inner.layers for m in (layer.input_layernorm, layer.post_attention_layernorm)]
    return all(hasattr(m, "variance_epsilon") and hasattr(m, "weight") for m in norms + [fast.inner.norm])


def lean_step(fast, tok, pos, attend, raw: bool = False):
    """One token per row through every layer with the fewest ops; attend(layer, q (B, H, D), k, v (B, Hkv, D))
    stores k, v in its cache and returns the attention output (B, H * D). Returns logits (B, V). The matmuls run
    on fast.packed (packed.py) when it is set, else on the fused weights through F.linear / addmm.
    raw: the elementwise work runs in cattn.py's C functions (the norms, silu x up) and attend(layer, qkv (B,
    (H + 2 Hkv) D), (cos, sin) each (B, D)) gets the projection's output and applies the rotary itself."""
    inner, pk = fast.inner, fast.packed
    H, Hkv, D = fast.n_heads, fast.n_kv, fast.head_dim
    B = tok.shape[0]
    h = inner.embed_tokens(tok)  # (B, C)
    cos, sin = inner.rotary_emb(h, pos[:, None])  # (B, 1, D)
    if raw:
        rope = (cos.view(B, D).float().contiguous(), sin.view(B, D).float().contiguous())
        dt = pk.dtype if pk is not None else torch.float32  # the norms' output: what the next product reads
        norm = lambda h, ln: cattn.rms_norm(h, ln.weight, ln.variance_epsilon, dt)  # noqa: E731
    else:
        sin = torch.cat([-sin[..., : D // 2], sin[..., D // 2:]], -1)  # rotate_half(x) * sin = roll(x) * sin'
        norm = lambda h, ln: F.rms_norm(h, h.shape[-1:], ln.weight, ln.variance_epsilon)  # noqa: E731
    for i, layer in enumerate(inner.layers):
        w_qkv, b_qkv, w_gu = fast.fused[i]
        w_o, w_down = layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight
        x = norm(h, layer.input_layernorm)
        qkv = F.linear(x, w_qkv, b_qkv) if pk is None else pk.linear(x, pk.layers[i][0], pk.qkv_bias[i])  # (B, .)
        if raw:
            o = attend(i, qkv, rope)  # (B, H * D)
        else:
            qk = qkv[:, : (H + Hkv) * D].view(B, H + Hkv, D)
            qk = torch.addcmul(qk * cos, qk.roll(D // 2, -1), sin)  # (B, H + Hkv, D) rotary
            o = attend(i, qk[:, :H], qk[:, H:], qkv[:, (H + Hkv) * D:].view(B, Hkv, D))  # (B, H * D)
        h = torch.addmm(h, o, w_o.t()) if pk is None else pk.add_linear(h, o, pk.layers[i][1])  # + o_proj
        x = norm(h, layer.post_attention_layernorm)
        gu = F.linear(x, w_gu) if pk is None else pk.linear(x, pk.layers[i][2])  # (B, 2I)
        if raw:
            a = cattn.silu_mul(gu)
        else:
            g, u = gu.chunk(2, dim=-1)  # (B, I)
            a = F.silu(g) * u
        h = torch.addmm(h, a, w_down.t()) if pk is None else pk.add_linear(h, a, pk.layers[i][3])  # + down
    x = norm(h, inner.norm) if raw else fast.final_norm(h)
    if pk is None:
        return fast.lm.lm_head(x)
    return pk.linear(x, pk.head, pk.head_bias)


CHUNK = 32
"""Generated columns the eager per-row cache allocates at a time: attention reads the whole allocation, so it is
one contiguous (B * Hkv, S, D) operand (a sliced one makes bmm run one small product per batch entry), at the
cost of up to CHUNK - 1 closed columns per step and a copy of the cache every CHUNK steps."""


@dataclass
class FlatCache:
    k: list
    """Per layer (B, Hkv, W + A, D): each row's prompt KV in columns [0, W), its generated KV from W on; A columns
    allocated (eager: CHUNK at a time; static: all), zero where never written."""
    v: list
    """Per layer, as k."""
    mask: torch.Tensor
    """(B * Hkv, 1, W + A) additive: 0 where the row may attend, -inf elsewhere (eager: a generated column is
    closed until the step that writes it; static: open, the graph closes the columns after its own)."""
    width: int
    """W: the prompt region's width (generated column t sits at W + t)."""
    budget: int
    """T: generated columns the decoder may write (`columns`); the eager cache allocates them as it goes."""
    static: object = None
    """None: eager steps (lean_step over the allocated columns). Else a staticstep.StaticStep: every step reads
    the whole width through one compiled graph."""

    @property
    def columns(self) -> int:
        """T: generated columns."""
        return self.budget

    @staticmethod
    def build(kv, valid, index, max_new: int, n_kv: int, static=None) -> "FlatCache":
        """kv: per layer (k, v) each (P, Hkv, W, D), left-padded prompts; valid (P, W) bool; index (B,) the prompt
        of each row; max_new: generated columns; static: see the field."""
        P, Hkv, W, D = kv[0][0].shape
        B = index.numel()
        A = max_new if static is not None else min(max_new, CHUNK)
        ks, vs = [], []
        for k, v in kv:
            nk, nv = (torch.zeros(B, Hkv, W + A, D, dtype=k.dtype, device=k.device) for _ in range(2))
            nk[:, :, :W], nv[:, :, :W] = k[index], v[index]
            ks.append(nk)
            vs.append(nv)
        mask = torch.zeros(B, 1, W + A, dtype=kv[0][0].dtype, device=index.device)
        mask[:, 0, :W].masked_fill_(~valid[index], float("-inf"))
        if static is None:
            mask[:, 0, W:] = float("-inf")
        return FlatCache(ks, vs, mask.repeat_interleave(n_kv, 0), W, max_new, static)

    def step(self, fast, tok, pos, t: int):
        """tok, pos (B,): one token per row, written at generated column t. Returns logits (B, V)."""
        if self.static is not None:
            return self.static(tok, pos, self.width + t, self.mask, self.k, self.v)
        H, Hkv, D = fast.n_heads, fast.n_kv, fast.head_dim
        B, grp, col = tok.shape[0], H // Hkv, self.width + t
        if col >= self.k[0].shape[2]:
            self._extend(CHUNK)
        self.mask[:, 0, col] = 0  # this token's column opens for every row
        mask, S = self.mask, self.k[0].shape[2]  # (B * Hkv, 1, S): the whole allocation, contiguous

        def attend(i, q, k, v):  # q (B, H, D), k and v (B, Hkv, D) -> (B, H * D)
            K, V = self.k[i], self.v[i]
            K[:, :, col], V[:, :, col] = k, v
            s = torch.baddbmm(mask, q.reshape(B * Hkv, grp, D), K.view(B * Hkv, S, D).transpose(1, 2),
                              alpha=fast.scaling)  # (B * Hkv, grp, S)
            p = torch.softmax(s, -1) if s.dtype == torch.float32 else torch.softmax(s.float(), -1).to(s.dtype)
            return torch.bmm(p, V.view(B * Hkv, S, D)).view(B, H * D)

        return lean_step(fast, tok, pos, attend)

    def _extend(self, extra: int) -> None:
        """Allocate `extra` more columns: zero KV, closed (-inf) in the mask until their step opens them."""
        for kv in (self.k, self.v):
            for i, x in enumerate(kv):  # one layer at a time: the old buffer is freed before the next is copied
                kv[i] = torch.cat([x, x.new_zeros(*x.shape[:2], extra, x.shape[3])], 2)
        self.mask = torch.cat([self.mask, self.mask.new_full((*self.mask.shape[:2], extra), float("-inf"))], 2)

    def select(self, rows, t: int) -> None:
        """Keep batch rows `rows` (B',)."""
        Hkv = self.k[0].shape[1]
        self.k, self.v = [k[rows] for k in self.k], [v[rows] for v in self.v]
        self.mask = self.mask.view(-1, Hkv, *self.mask.shape[1:])[rows].flatten(0, 1)

    def add(self, kv, valid, n: int, t: int) -> None:
        """Append n rows of one prompt (kv per layer (1, Hkv, L, D), valid (1, L)) that start at generated column
        t: they read their prompt and generated columns from t on."""
        L, W, Hkv = valid.shape[1], self.width, self.k[0].shape[1]
        if L > W:  # widen every row's prompt region on the left (masked)
            grow = L - W
            pad = lambda x: torch.cat([x.new_zeros(*x.shape[:2], grow, x.shape[3]), x], 2)  # noqa: E731
            self.k, self.v = [pad(k) for k in self.k], [pad(v) for v in self.v]
            self.mask = torch.cat([self.mask.new_full((*self.mask.shape[:2], grow), float("-inf")), self.mask], 2)
            W = self.width = L
        S = self.k[0].shape[2]
        for layer, (pk, pv) in enumerate(kv):
            nk, nv = pk.new_zeros(n, Hkv, S, pk.shape[3]), pv.new_zeros(n, Hkv, S, pv.shape[3])
            nk[:, :, W - L: W], nv[:, :, W - L: W] = pk, pv
            self.k[layer], self.v[layer] = torch.cat([self.k[layer], nk]), torch.cat([self.v[layer], nv])
        m = torch.zeros(n, 1, S, dtype=self.mask.dtype, device=self.mask.device)
        m[:, 0, : W - L] = float("-inf")
        m[:, 0, W - L: W].masked_fill_(~valid, float("-inf"))
        if self.static is None:
            m[:, 0, W:] = float("-inf")  # generated columns written before this row joined, and the future ones
        else:
            m[:, 0, W: W + t] = float("-inf")  # generated columns written before this row joined
        self.mask = torch.cat([self.mask, m.repeat_interleave(Hkv, 0)])

    def grow(self, extra: int) -> None:
        """Make room for `extra` more generated columns."""
        self.budget += extra
        if self.static is not None:
            more = lambda x: torch.cat([x, x.new_zeros(*x.shape[:2], extra, x.shape[3])], 2)  # noqa: E731
            self.k, self.v = [more(k) for k in self.k], [more(v) for v in self.v]
            self.mask = torch.cat([self.mask, self.mask.new_zeros(*self.mask.shape[:2], extra)], 2)

    def export(self, b: int, n_gen: int) -> list:
        """Row b's KV: its prompt's real tokens, then its first n_gen generated ones; per layer (k, v) each
        (Hkv, S, D). Copies."""
        Hkv = self.k[0].shape[1]
        real = self.mask[b * Hkv, 0, : self.width + n_gen] == 0  # (W + n_gen,)
        return [(k[b][:, : self.width + n_gen][:, real], v[b][:, : self.width + n_gen][:, real])
                for k, v in zip(self.k, self.v)]
