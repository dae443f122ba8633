"""Mixed precision (`model.compute_dtype`): bf16 compute over the weights of `model.dtype`, as real trainers run it.

    model: {dtype: float32, compute_dtype: bfloat16}    # bf16 matmuls, fp32 master weights and AdamW state

`compute_autocast(compute_dtype, device)` is the context every forward of a run enters (the sampler's, the
update's policy, pi_old and reference passes, SFT's and DPO's losses, the probe and `--dry-run`): torch.autocast to
bfloat16 on the model's device type, or nothing when compute_dtype is "" or equals the weights' dtype. Under it
the projections, MLP and LM head run in bf16 (the fused head too: lm_head.py casts each block of the head to bf16
and keeps the softmax statistics fp32); the residual stream, RMSNorm statistics, the log-softmax and (on CPU,
fastlm.py) attention stay fp32. What stays fp32: the weights, their gradients (autocast's bf16 copies send theirs
back through the cast) and the AdamW moments, so an update of 1e-6 x a weight still moves it
(tests/test_mixed_precision.py), where pure bf16 weights (`model.dtype: bfloat16`) round most of them away.
This is the HF Trainer's `bf16=True` and verl's FSDP `mixed_precision: {param_dtype: bf16, reduce_dtype: fp32}`
up to the gradient reduction, which here is fp32 as well.

Devices: a CUDA GPU without bf16 is refused (`check_autocast`). A CPU without AVX512-bf16/AMX runs it (the CPU
rehearsal of a GPU run does) with a warning: there bf16 GEMMs are emulated, many times slower than fp32 (measured
on an AVX2 AMD EPYC: 25-50x), and a bf16 update lands 0.68x of fp32's step away from fp32's, against < 0.05x on
AMX (bench/update_speed.py).

Kernel caches: on a CPU, bf16 matmuls run through oneDNN, which keeps one compiled primitive per distinct GEMM
shape, in two caches (oneDNN's own and PyTorch's ideep LRU) of 1,024 entries each, ~0.57 MB per shape for the
pair (measured on a 2-core AMD EPYC VM, torch 2.13). A training step brings new shapes every time (the LM head
runs over the step's count of real tokens, the prompt pass over its prompts' padded length), so under bf16 the
process grew by ~20 MB a step on bench/vs_trl.py's workload until the caches filled, up to ~600 MB. fp32 matmuls
run through MKL, which keeps nothing per shape. `bound_kernel_caches` caps both caches at
KERNEL_CACHE_CAPACITY entries for CPU bf16 compute (ONEDNN_PRIMITIVE_CACHE_CAPACITY and LRU_CACHE_CAPACITY;
values the environment sets are kept): it is read at the process's first oneDNN op, so `load_policy` sets it
before the model exists. On that workload 16 entries cost no measurable time (one step's own shapes repeat
over the layers) and held the bf16 run's peak at fp32's (tests/test_mixed_precision.py).
"""
from __future__ import annotations

import contextlib
import os
import warnings

import torch

from codechat import CodechatError
from codechat.config.rollout import COMPUTE_DTYPES

KERNEL_CACHE_CAPACITY = 16  # oneDNN primitives kept per cache under CPU bf16 compute (module docstring)
KERNEL_CACHE_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # oneDNN's cache, PyTorch's ideep LRU


def autocast_dtype(compute_dtype: str, weight_dtype) -> torch.dtype | None:
    """The autocast dtype for compute_dtype over weights of `weight_dtype`, or None (no autocast)."""
    if compute_dtype not in COMPUTE_DTYPES:
        raise CodechatError(f"model.compute_dtype: '{compute_dtype}' is not one of float32, bfloat16 (or empty)")
    if compute_dtype in ("", "float32"):
        return None
    dt = getattr(torch, compute_dtype)
    return None if weight_dtype == dt else dt


def compute_autocast(compute_dtype: str, device, weight_dtype=torch.float32) -> contextlib.AbstractContextManager:
    """torch.autocast(device type, compute dtype) when it differs from the weights' dtype, else a no-op."""
    dt = autocast_dtype(compute_dtype, weight_dtype)
    if dt is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dt)


def bound_kernel_caches(compute_dtype: str, device, weight_dtype=torch.float32) -> bool:
    """Under CPU bf16 compute, cap oneDNN's per-shape kernel caches at KERNEL_CACHE_CAPACITY entries (module
    docstring) where the environment does not set them. Effective only before the process's first oneDNN op
    (call it before any forward). Returns whether it applies (CPU autocast to a lower dtype)."""
    if torch.device(device).type != "cpu" or autocast_dtype(compute_dtype, weight_dtype) is None:
        return False
    for var in KERNEL_CACHE_VARS:
        os.environ.setdefault(var, str(KERNEL_CACHE_CAPACITY))
    return True


def bf16_native(device) -> bool:
    """Whether bf16 matmuls run natively on `device`: oneDNN's check on a CPU (AVX512-bf16 or AMX), CUDA's on a GPU."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dev.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return True


def check_autocast(compute_dtype: str, device) -> None:
    """Refuse bf16 compute on a GPU without bf16 (one line); warn on a CPU without native bf16 (slow there)."""
    if compute_dtype != "bfloat16" or bf16_native(device):
        return
    dev = torch.device(device)
    if dev.type != "cpu":
        raise CodechatError(f"model.compute_dtype=bfloat16: {device} has no bf16 support; use compute_dtype="
                            "float32 on this GPU")
    warnings.warn(f"model.compute_dtype=bfloat16: this CPU has no native bf16 "
                  f"({torch.backends.cpu.get_cpu_capability()}; AVX512-bf16 or AMX has): bf16 matmuls are emulated, "
                  "many times slower than fp32 (fine for a rehearsal of a GPU run; drop it for speed)")
