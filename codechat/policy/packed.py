"""The lean decode step's matmuls on weights repacked for oneDNN (CPU, fp32 or bf16), refreshed on every sample call.

Why: a decode step multiplies a few dozen rows by every projection and the LM head. `F.linear` runs that as an
MKL sgemm over the (out, in) weight as it lies in memory; oneDNN's linear over a weight reordered once into its
own blocked layout (`torch.ops.mkldnn._reorder_linear_weight`, the layout inductor's CPU freezing pass uses) runs
the same products at 1.4-1.6x the rate on this CPU at 32 rows (2-core AMD EPYC VM with AVX512: 67-79 against
50-52 GFLOP/s on the `tiny` preset's shapes, 86-88 against 55-56 on `small`'s), and adds the residual in the same
call (`_linear_pointwise.binary`, what `addmm` did).

What it simplifies: the packed copies are taken from the fused weights (FastLM.fuse) when the decoder's first
step runs, i.e. once per sample call, so they always hold the current weights (an optimizer step between two
calls cannot leave them stale); that costs one pass over the weights per call (6 ms on `tiny`, 45-52 ms on
`small`: 1-2 % of a 4 x 8 x 64 sample call). Batches of fewer than MIN_ROWS rows, or calls of fewer than
MIN_TOKENS rows x new tokens, keep `F.linear`: a row or two is a matrix-vector product either way, and a short call
would not repay the reorder.

The results are the same products summed in another order: logits differ from `F.linear`'s by float rounding
(~1e-6 relative), as the compiled step's do, and the sampled tokens are the same for the same seed
(tests/test_packed_decode.py, on the test model through EOS and compaction and on the `tiny` preset).
`sampling.packed_weights: false` keeps `F.linear`.

Under bf16 compute (`model.compute_dtype: bfloat16`: the sampler runs inside CPU autocast) the copies are bf16 and
the lean step runs with autocast off, giving each op the dtypes the model's autocast forward gives it (bf16
products, fp32 residual stream, norms and attention); without packed weights a bf16 decode keeps that forward.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_ROWS = 8
"""Fewest batch rows a sample call needs at its first step for its decode to use packed weights."""

MIN_TOKENS = 256
"""Fewest rows x new-token budget a sample call needs: the reorder (one pass over the weights) is repaid over a
few dozen steps of 8 rows or a few of 32."""

MAX_PARAMS = 100_000_000
"""Larger models keep F.linear: the packed copy adds the model's size in memory for the length of a call."""


def compute_dtype(device) -> torch.dtype:
    """The dtype the decode's matmuls compute in: autocast's inside CPU autocast (`model.compute_dtype`), else fp32."""
    on = torch.device(device).type == "cpu" and torch.is_autocast_enabled("cpu")
    return torch.get_autocast_dtype("cpu") if on else torch.float32


def usable(fast, device, rows: int, max_new: int) -> bool:
    """Packed weights apply: a CPU fp32 model of at most MAX_PARAMS parameters with fused weights and a plain
    nn.Linear LM head, oneDNN built into torch, at least MIN_ROWS rows and MIN_TOKENS rows x max_new, computing
    in fp32 or, inside CPU autocast, in bf16."""
    head = fast.lm.lm_head
    return (rows >= MIN_ROWS and rows * max_new >= MIN_TOKENS and torch.device(device).type == "cpu"
            and compute_dtype(device) in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available()
            and fast.fused is not None and type(head) is torch.nn.Linear and head.weight.dtype == torch.float32
            and all(w.dtype == torch.float32 for w_qkv, _, w_gu in fast.fused for w in (w_qkv, w_gu))
            and sum(p.numel() for p in fast.lm.parameters()) <= MAX_PARAMS)


@dataclass
class PackedWeights:
    layers: list
    """Per layer (qkv, o, gate_up, down), each the weight reordered for oneDNN (a mkldnn tensor)."""
    head: torch.Tensor
    """The LM head's weight, reordered."""
    head_bias: torch.Tensor | None
    """The LM head's bias, if any."""
    qkv_bias: list
    """Per layer, the fused q/k/v bias (or None) in `dtype`."""
    dtype: torch.dtype = torch.float32
    """What the products compute in: fp32, or bf16 as autocast runs a linear (inputs, weights, bias, output)."""

    @staticmethod
    @torch.no_grad()
    def build(fast, dtype: torch.dtype = torch.float32) -> "PackedWeights":
        """fast: a fused FastLM (flatkv.flat_ok) that `usable` accepts. Copies: call again after the weights change."""
        cast = lambda t: None if t is None else t.detach().to(dtype)  # noqa: E731
        pack = lambda w: torch.ops.mkldnn._reorder_linear_weight(cast(w), None)  # noqa: E731
        layers = [(pack(w_qkv), pack(ly.self_attn.o_proj.weight), pack(w_gu), pack(ly.mlp.down_proj.weight))
                  for ly, (w_qkv, _, w_gu) in zip(fast.inner.layers, fast.fused)]
        head = fast.lm.lm_head
        return PackedWeights(layers, pack(head.weight), cast(head.bias), [cast(b) for _, b, _ in fast.fused], dtype)

    def linear(self, x, w, b=None):
        """x (R, in) @ packed w (out, in)^T + b -> (R, out), in self.dtype."""
        return linear(x.to(self.dtype), w, b)

    def add_linear(self, res, x, w):
        """res + x @ packed w^T: one call in fp32; in bf16 the product is bf16 and the sum takes res's dtype, as
        `res + linear(x)` does under autocast (the residual stream stays fp32)."""
        if self.dtype == torch.float32:
            return linear_add(x, w, res)
        return res + linear(x.to(self.dtype), w)


def linear(x, w, b=None):
    """x (R, in) @ packed w (out, in)^T + b -> (R, out)."""
    return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")


def linear_add(x, w, res):
    """res + x (R, in) @ packed w^T -> (R, out), in one call."""
    return torch.ops.mkldnn._linear_pointwise.binary(x, res, w, None, "add")
