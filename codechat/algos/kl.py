"""KL-to-reference estimators, per token, from the log-probs of the sampled tokens (Schulman, "Approximating KL
divergence", 2020). Samples come from the policy pi; with log r = log pi_ref(y_t) - log pi(y_t):

    k1 = -log r                 unbiased for KL(pi || ref), high variance, can be negative
    k2 = (log r)^2 / 2          biased, low variance, >= 0
    k3 = (r - 1) - log r        unbiased for KL(pi || ref), low variance, >= 0 (DeepSeekMath's choice)

As a loss the estimate is differentiated with the sampled tokens held fixed, so what matters is its expected
gradient E_{y~pi}[grad k(y)], not its value (tests/test_kl.py checks each exactly on a small distribution):
    k1 -> E[grad log pi] = 0: no regularisation at all, only noise. Refused as a loss (`KL_NO_GRADIENT`; the
          config check), though it stays available as a metric.
    k2 -> E[log(pi/ref) grad log pi] = grad KL(pi || ref): the reverse KL, mode-seeking.
    k3 -> E[(1 - ref/pi) grad log pi] = -sum_y ref grad log pi = grad KL(ref || pi): the forward KL, mass-covering,
          although k3's value estimates KL(pi || ref).
(For a penalty on the reward instead of the loss, as in PPO-RLHF, k1 is the natural choice; codechat has none.)

log r is clamped to [-20, 20] before exponentiating so k3 stays finite (verl clamps likewise).
The trainer calls `kl_loss`: the loss term kl_beta * agg_loss(k, mask, agg) and the logged `kl` (token mean of
the estimate) come from that one function.
"""
from __future__ import annotations

import torch

from codechat.algos.aggregation import agg_loss, masked_mean
from codechat.algos.registry import Registry

KL_ESTIMATORS = Registry("KL estimator", ("logp", "ref_logp"))
KL_NO_GRADIENT = ("k1",)
"""Estimators whose expected gradient is zero: refused as a loss term (algos.check_config)."""
LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to +-this before exp (exp(20) ~ 5e8 is finite in float32 and bfloat16)."""


@KL_ESTIMATORS.register("k1")
def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp  # (B, T)


@KL_ESTIMATORS.register("k2")
def k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp) ** 2  # (B, T)


@KL_ESTIMATORS.register("k3")
def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    log_r = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    return torch.exp(log_r) - 1 - log_r  # (B, T)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate (B, T) of the policy to the reference by a named estimator: k1, k2, k3."""
    return KL_ESTIMATORS[estimator](logp, ref_logp)


def kl_loss(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, cfg) -> tuple[torch.Tensor, dict]:
    """The loss term kl_beta * agg_loss(KL, mask, cfg.agg, cfg.agg_norm), and metrics {kl: token mean of the KL}.

    Padded entries are zeroed before the estimator, so even NaN padding cannot reach the gradients.
    """
    m = mask > 0  # (B, T)
    logp, ref_logp = torch.where(m, logp, 0.0), torch.where(m, ref_logp, 0.0)
    kl = kl_penalty(logp, ref_logp, cfg.kl_estimator)  # (B, T)
    loss = cfg.kl_beta * agg_loss(kl, mask, cfg.agg, cfg.agg_norm)
    return loss, {"kl": masked_mean(kl.detach(), mask).item()}
