"""A decode step with static shapes, for `torch.compile`: one graph serves every step of a batch.

Why: at the presets' sizes a decode step's matrices are small, and eager PyTorch pays a dispatch per op (~15 per
layer) plus a pass over memory per elementwise op. Compiled by inductor, the elementwise ops (RMSNorm, rotary,
softmax, SwiGLU, the sampling math) fuse into a few C++ loops and the Python between ops disappears; the matmuls
stay the same ATen/MKL calls. A graph is only reusable when nothing in it depends on the step: so the KV cache
has a fixed width (prompt region + every generated column, preallocated), the column written is a tensor, not a
Python int, and attention always reads the whole width under an additive mask that the caller opens one column
per step. Rows that finish stay in the batch until the live rows fit a smaller bucket (a power of two; the
sampler's compaction asks `FastDecoder.rows_for`), so a sample call reaches at most log2(rows) + 1 graphs, and
later calls of the same shape reuse them (dynamic shapes would compile once but decode no faster than eager).

`StaticWeights.build(fast)` gathers the fused weights (FastLM.fuse) and the rotary frequencies; `step(...)` is
the plain function that is compiled; `StaticStep` is what flatkv.FlatCache calls. Same math as
flatkv.lean_step (the eager path), up to float rounding where inductor reorders a reduction (tests/
test_staticstep.py: the same tokens as eager). Used with `sampling.compile: true`; bench/sample_throughput.py
--compile measures it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)


@dataclass
class StaticWeights:
    embed: torch.Tensor
    """(V, C) token embeddings."""
    inv_freq: torch.Tensor
    """(D / 2,) float: the rotary module's frequencies."""
    rope_scale: float
    """The rotary module's attention_scaling (cos and sin are multiplied by it)."""
    layers: list
    """Per layer (ln1, w_qkv, b_qkv, w_o, ln2, w_gate_up, w_down)."""
    norm: torch.Tensor
    """(C,) final RMSNorm weight."""
    head: torch.Tensor
    """(V, C) LM head."""
    eps: float
    """RMSNorm epsilon."""
    n_heads: int
    n_kv: int
    head_dim: int
    scaling: float

    @staticmethod
    @torch.no_grad()
    def build(fast) -> "StaticWeights":
        """fast: a fused FastLM (flatkv.flat_ok) whose rotary module is static (`supports`)."""
        inner = fast.inner
        emb = inner.embed_tokens.weight
        rot = inner.rotary_emb
        layers = [(ly.input_layernorm.weight, w_qkv, b_qkv, ly.self_attn.o_proj.weight,
                   ly.post_attention_layernorm.weight, w_gu, ly.mlp.down_proj.weight)
                  for ly, (w_qkv, b_qkv, w_gu) in zip(inner.layers, fast.fused)]
        return StaticWeights(emb, rot.inv_freq.float(), float(rot.attention_scaling), layers, inner.norm.weight,
                             fast.lm.lm_head.weight, inner.norm.variance_epsilon, fast.n_heads, fast.n_kv,
                             fast.head_dim, fast.scaling)


def step(w: StaticWeights, tok, pos, col, mask, ks: list, vs: list):
    """tok, pos (B,) long; col (1,) long: the cache column this token's k, v go to; mask (B * Hkv, 1, S) additive:
    which columns each row may read, columns after col aside (they are closed here); ks, vs: per layer
    (B, Hkv, S, D), written at col, zero where never written. Returns logits (B, V) float."""
    H, Hkv, D = w.n_heads, w.n_kv, w.head_dim
    B, S, grp = tok.shape[0], ks[0].shape[2], H // Hkv
    cols = torch.arange(S, device=tok.device)
    mask = mask.masked_fill(cols > col, float("-inf"))  # (B * Hkv, 1, S): nothing after this token's column
    h = F.embedding(tok, w.embed)  # (B, C)
    freqs = pos[:, None].float() * w.inv_freq  # (B, D / 2): the rotary module's inv_freq @ pos, one product each
    cos = (torch.cat([freqs, freqs], -1).cos() * w.rope_scale).to(h.dtype)[:, None]  # (B, 1, D)
    sin = freqs.sin() * w.rope_scale
    sin = torch.cat([-sin, sin], -1).to(h.dtype)[:, None]  # first half negated: rotate_half(x) * sin = roll(x) * sin'
    for i, (ln1, w_qkv, b_qkv, w_o, ln2, w_gu, w_down) in enumerate(w.layers):
        qkv = F.linear(F.rms_norm(h, h.shape[-1:], ln1, w.eps), w_qkv, b_qkv)  # (B, (H + 2 Hkv) D)
        qk = qkv[:, : (H + Hkv) * D].view(B, H + Hkv, D)
        qk = qk * cos + qk.roll(D // 2, -1) * sin  # (B, H + Hkv, D) rotary
        ks[i].index_copy_(2, col, qk[:, H:, None])
        vs[i].index_copy_(2, col, qkv[:, (H + Hkv) * D:].view(B, Hkv, 1, D))
        s = torch.baddbmm(mask, qk[:, :H].reshape(B * Hkv, grp, D), ks[i].view(B * Hkv, S, D).transpose(1, 2),
                          alpha=w.scaling)  # (B * Hkv, grp, S)
        o = torch.bmm(torch.softmax(s.float(), -1).to(s.dtype), vs[i].view(B * Hkv, S, D)).view(B, H * D)
        h = torch.addmm(h, o, w_o.t())  # residual + o_proj
        g, u = F.linear(F.rms_norm(h, h.shape[-1:], ln2, w.eps), w_gu).chunk(2, dim=-1)  # (B, I) each
        h = torch.addmm(h, F.silu(g) * u, w_down.t())  # residual + down_proj
    return F.linear(F.rms_norm(h, h.shape[-1:], w.norm, w.eps), w.head).float()


def supports(fast) -> bool:
    """The rotary module computes cos/sin from positions and fixed frequencies alone (not `dynamic` rope, whose
    frequencies change with the sequence length)."""
    rot = fast.inner.rotary_emb
    return (hasattr(rot, "inv_freq") and hasattr(rot, "attention_scaling")
            and "dynamic" not in str(getattr(rot, "rope_type", "default")))


_COMPILED: dict = {}
"""The compiled `step` (one per process: dynamo keeps a graph per shape and model layout behind it)."""


RECOMPILE_LIMIT = 64
"""Graphs dynamo may keep for `step` (one per batch bucket x cache width x model layout)."""


def compiled_step():
    """`step` under torch.compile with static shapes: a graph per (batch, cache width), each reused by every step
    of every batch of that shape. (Dynamic shapes compile once but decode ~20 % slower on CPU.)"""
    if "step" not in _COMPILED:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        _COMPILED["step"] = torch.compile(step, dynamic=False, fullgraph=True)
    return _COMPILED["step"]


def bucket(n: int) -> int:
    """Batch rows a static step decodes for n live rows: the next power of two (finished rows fill the rest)."""
    return 1 << max(0, n - 1).bit_length()


def width(columns: int, align: int = 64) -> int:
    """Cache columns allocated for `columns` needed: rounded up to `align`, so batches share a graph."""
    return -(-columns // align) * align


class StaticStep:
    """A FlatCache's step (flatkv.py) through `step`, compiled or eager."""

    def __init__(self, fast, compiled: bool):
        self.weights = StaticWeights.build(fast)
        self.fn = compiled_step() if compiled else step

    def __call__(self, tok, pos, col: int, mask, ks, vs):
        """tok, pos (B,); col: the cache column written. Returns logits (B, V). A graph that fails to compile
        (e.g. no C++ compiler for inductor) leaves this process on the eager `step`, with a warning."""
        col = torch.tensor([col], device=tok.device)
        try:
            return self.fn(self.weights, tok, pos, col, mask, ks, vs)
        except Exception as e:  # a compile failure comes before the graph runs: nothing written yet
            # matched by name: importing torch._dynamo's exceptions costs seconds at start-up
            if self.fn is step or type(e).__name__ not in ("BackendCompilerFailed", "InductorError"):
                raise
            log.warning("sampling.compile: torch.compile failed (%s); decoding eagerly", str(e).splitlines()[0])
            _COMPILED["step"] = self.fn = step
            return step(self.weights, tok, pos, col, mask, ks, vs)
