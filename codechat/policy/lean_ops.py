"""Two pieces of the training forward as autograd functions that save less for the backward and run a shorter one
(same values).

- `SiluMulLinear`: the SwiGLU MLP's tail, `down_proj(silu(g) * u)`. Autograd saves four (rows, intermediate)
  tensors for it: g (for silu's backward), silu(g) and u (for the product's) and the product (for down_proj's
  weight gradient). This saves g and u only and recomputes silu(g) and the product in the backward, in place
  where a buffer is free (one (rows, intermediate) temporary besides the gradients).
- `WeightedRMSNorm`: `weight * rms_norm(x)`. Autograd keeps x (for rms_norm's backward) and the normalised x (for
  the product's) and runs rms_norm's backward as a dozen elementwise ops; this keeps x and its per-row rstd
  (rows, 1) and writes the backward out: one (rows, C) temporary, both row sums as matrix-vector products.

The recomputations are elementwise, cheap next to the matmuls. On bench/vs_trl.py's model (hidden 256,
intermediate 688, 4 layers, 2,048 completion tokens in 2 length chunks) a training forward keeps 22 + 16 MB
less. The forwards run the model's own ops (bit-identical outputs); SiluMulLinear's backward runs the kernels
autograd would (`silu_backward`, the matmuls: bit-identical gradients), WeightedRMSNorm's its closed form (fp32
rounding apart from autograd's, as close to exact). At 1,024 rows x 256 a norm's forward + backward takes 0.4x the
plain ops' CPU time (tests/test_lean_memory.py checks outputs, gradients and the saved bytes against plain
autograd).

Under CPU autocast (`model.compute_dtype: bfloat16` over fp32 weights) they compute what the model's own ops
compute there: g and u arrive in bf16 (autocast's gate/up projections), silu and the product run in bf16, the
down projection is autocast's linear (bf16 inputs and weight copy, bf16 output); its backward multiplies in bf16
against a bf16 copy of the weight made again in the backward (autograd would keep autocast's copy) and hands the
weight's gradient back in fp32, as autocast's cast does. The norm's input is the fp32 residual, which autocast
leaves in fp32, and its backward stays in fp32. Outputs are bit-identical to the plain ops under autocast
(tests/test_lean_memory.py), gradients too but for the norm's fp32 rounding and one difference: where one
autocast region runs the MLP more than once (fastlm's prompt pass, then the completions), autocast's one cached
bf16 weight copy sums down_proj's weight gradients in bf16 before casting the sum back, and these return each
call's in fp32, summed in fp32 (one bf16 rounding apart, and closer to exact).
On bench/vs_trl.py's workload (1,024-token micro-batches) a bf16 training forward saves 62-64 MB instead of 81-83.

fastlm uses them in training forwards (grad enabled, fp32 activations, no autocast or CPU autocast): SiluMulLinear
when the MLP is plain SwiGLU with an `nn.Linear` down_proj (gate/up may be LoRA layers: they run as modules),
WeightedRMSNorm for the transformers RMSNorm classes it already runs as `F.rms_norm`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from codechat.policy import cattn


class SiluMulLinear(torch.autograd.Function):
    """g, u (..., I), weight (C, I), bias (C,) or None -> linear(silu(g) * u, weight, bias) (..., C)."""

    @staticmethod
    def forward(ctx, g, u, weight, bias):
        ctx.save_for_backward(g, u, weight)
        ctx.bias_dtype = None if bias is None else bias.dtype
        out = F.linear(F.silu(g).mul_(u), weight, bias)  # under autocast: autocast's linear (its dtype out)
        ctx.cd = out.dtype  # the dtype the linear multiplied in
        return out

    @staticmethod
    def backward(ctx, grad):
        g, u, weight = ctx.saved_tensors
        with torch.autocast(grad.device.type, enabled=False):  # the casts are explicit, as autocast made them
            grad2 = grad.reshape(-1, grad.shape[-1])  # (R, C)
            d_a = (grad2 @ weight.to(ctx.cd)).view(g.shape)  # (..., I) gradient of the product silu(g) * u
            s = F.silu(g)  # (..., I) recomputed
            d_u = d_a * s if ctx.needs_input_grad[1] else None
            # the product, recomputed into silu(g)'s buffer once d_u no longer needs it: one (..., I) temporary
            d_w = (grad2.t() @ s.mul_(u).to(ctx.cd).reshape(-1, g.shape[-1])).to(weight.dtype) \
                if ctx.needs_input_grad[2] else None  # (C, I)
            need_b = ctx.bias_dtype is not None and ctx.needs_input_grad[3]
            d_b = grad2.sum(0).to(ctx.bias_dtype) if need_b else None  # (C,)
            # silu's backward written over d_a (elementwise, in place): the same kernel autograd runs
            d_g = torch.ops.aten.silu_backward.grad_input(d_a.mul_(u), g, grad_input=d_a) \
                if ctx.needs_input_grad[0] else None
        return d_g, d_u, d_w, d_b


class WeightedRMSNorm(torch.autograd.Function):
    """x (..., C), weight (C,), eps -> weight * rms_norm(x) (..., C)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        # rms_norm's own ops (aten's CPU rms_norm: fp32 statistics, then x * rstd), keeping rstd (..., 1)
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps))
        ctx.save_for_backward(x, weight, rstd)
        return (x * rstd).mul_(weight)

    @staticmethod
    def backward(ctx, grad):
        # y = w * x * r, r = (mean(x^2) + eps)^-1/2: dx = r * (grad * w) - x * r^3 * sum(grad * w * x) / C,
        # dw = sum over rows of grad * x * r. Both row sums are matrix-vector products of grad * x, the one
        # (..., C) temporary besides dx.
        x, weight, rstd = ctx.saved_tensors
        C = x.shape[-1]
        with torch.autocast(x.device.type, enabled=False):  # fp32 throughout, as the forward ran
            gx = grad * x  # (..., C)
            d_w = torch.mv(gx.reshape(-1, C).t(), rstd.reshape(-1)) if ctx.needs_input_grad[1] else None  # (C,)
            d_x = None
            if ctx.needs_input_grad[0]:
                c = torch.mv(gx.reshape(-1, C), weight).view(rstd.shape).mul_(rstd.pow(3)).div_(C)  # (..., 1)
                d_x = (grad * weight).mul_(rstd).addcmul_(x, c, value=-1)  # (..., C)
        return d_x, d_w, None


class Rotary(torch.autograd.Function):
    """x * cos + rotate_half(x) * sin through cattn.py's C functions: the same bits forward and backward as the
    torch ops (x fp32 or bf16, cos and sin fp32), one pass each way where autograd runs ~5 ops forward and ~7
    backward, and only cos and sin kept for the backward."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        ctx.x_dtype = x.dtype
        return cattn.rope_forward(x, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return cattn.rope_backward(grad, cos, sin, ctx.x_dtype), None, None


def rotary(x, cos, sin, rotate_half):
    """x (..., heads, D) with cos, sin (..., 1, D): Rotary where cattn applies (CPU), else the torch ops."""
    if cattn.rope_applies(x, cos) and sin.is_contiguous() and sin.shape == cos.shape and sin.dtype == cos.dtype \
            and not (cos.requires_grad or sin.requires_grad):
        return Rotary.apply(x, cos, sin)
    return x * cos + rotate_half(x) * sin


def lean_swiglu(mlp) -> bool:
    """The MLP is down_proj(silu(gate_proj(x)) * up_proj(x)) with a plain nn.Linear down_proj."""
    act = type(getattr(mlp, "act_fn", None)).__name__
    return (act in ("SiLU", "SiLUActivation") and hasattr(mlp, "gate_proj") and hasattr(mlp, "up_proj")
            and type(getattr(mlp, "down_proj", None)) is torch.nn.Linear)


def swiglu(mlp, x):
    """The model's SwiGLU MLP on x (..., C), through SiluMulLinear (same values, fewer saved activations)."""
    d = mlp.down_proj
    return SiluMulLinear.apply(mlp.gate_proj(x), mlp.up_proj(x), d.weight, d.bias)


def lean_training(x) -> bool:
    """A training forward on fp32 activations, without autocast or under CPU autocast: where these functions
    apply (a GPU's autocast is not covered)."""
    on = torch.is_autocast_enabled(x.device.type)
    return torch.is_grad_enabled() and x.dtype == torch.float32 and (not on or x.device.type == "cpu")
