"""Lower-precision compute for the RL update (`rl.autocast_bf16`), off by default.

`update_autocast(enabled, device)` is the context the update's forwards (policy, pi_old, reference) run in:
torch.autocast to bfloat16 on the model's device type, or nothing. Under it the projections, MLP and LM head
run in bf16 (on a CPU with AMX/AVX512-bf16, fp32 GEMMs run at ~80 GFLOP/s on one core, bf16 ones at ~470);
the residual stream, RMSNorm statistics, attention (fastlm.py keeps CPU attention fp32: the bf16 SDPA backward
is several times slower than the fp32 one) and the log-softmax stay fp32.

What it changes: every log-prob, by ~2e-3 on average (bench/update_speed.py reports the figure); the sampler
still runs in fp32, so the sampler/trainer gap metrics (logp_gap_*) and truncated IS see that difference. Hence
opt-in. Not changed: the weights, gradients and optimizer state stay in the model's dtype.
"""
from __future__ import annotations

import contextlib

import torch


def update_autocast(enabled: bool, device) -> contextlib.AbstractContextManager:
    """torch.autocast(device type, bfloat16) when enabled, else a no-op context."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
