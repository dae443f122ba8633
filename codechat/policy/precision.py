"""Lower-precision compute for the RL update (`rl.autocast_bf16`), off by default.

`update_autocast(enabled, device)` is the context the update's forwards (policy, pi_old, reference) run in:
torch.autocast to bfloat16 on the model's device type, or nothing. Under it the projections, MLP and LM head
run in bf16 (on a CPU with AMX/AVX512-bf16, fp32 GEMMs run at ~80 GFLOP/s on one core, bf16 ones at ~470);
the residual stream, RMSNorm statistics, attention (fastlm.py keeps CPU attention fp32: the bf16 SDPA backward
is several times slower than the fp32 one) and the log-softmax stay fp32.

What it changes: every log-prob, by ~2e-3 on average (bench/update_speed.py reports the figure); the sampler
still runs in fp32, so the sampler/trainer gap metrics (logp_gap_*) and truncated IS see that difference. Hence
opt-in. Not changed: the weights, gradients and optimizer state stay in the model's dtype.

Refused (`check_autocast`, at the start of a run) where bf16 is not native: a CPU without AVX512-bf16/AMX
(measured on an AVX2 AMD EPYC: bf16 GEMMs 25-50x slower than fp32, and one `rl_update` moved the weights 0.68x
of fp32's step away from fp32's, against < 0.05x on AMX), or a GPU without bf16.
"""
from __future__ import annotations

import contextlib

import torch

from codechat import CodechatError


def update_autocast(enabled: bool, device) -> contextlib.AbstractContextManager:
    """torch.autocast(device type, bfloat16) when enabled, else a no-op context."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def bf16_native(device) -> bool:
    """Whether bf16 matmuls run natively on `device`: oneDNN's check on a CPU (AVX512-bf16 or AMX), CUDA's on a GPU."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dev.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return True


def check_autocast(enabled: bool, device) -> None:
    """Refuse rl.autocast_bf16 on a device without native bf16 (slower and less exact there), in one line."""
    if enabled and not bf16_native(device):
        cap = torch.backends.cpu.get_cpu_capability() if torch.device(device).type == "cpu" else str(device)
        raise CodechatError(f"rl.autocast_bf16=true: {device} has no native bf16 ({cap}; needs AVX512-bf16 or AMX "
                            "on a CPU), where bf16 runs many times slower than fp32 and less exactly: leave it off")
