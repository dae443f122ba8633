"""Off-policy corrections (one signature, in CORRECTIONS): per-token weights for samples whose behaviour policy
(the sampler: vLLM, or the previous weights under asynchronous rollouts) differs from the trainer's old policy.

    fn(old_logp (B,T), sampler_logp (B,T), mask (B,T), cfg) -> (weights (B,T) detached, or None = no weighting;
                                                               metrics dict[str, float])

r_t = exp(old_logp_t - sampler_logp_t) is the token ratio pi_old / pi_sampler.
    tis      min(r_t, cfg.tis_cap): truncated importance sampling per token; tis_cap 0 = off (None)
    seq-is   min(exp(mean_t log r_t), cfg.tis_cap), the same for every token of a sequence: GSPO's geometric-mean
             ratio, length-normalised so long sequences do not explode; tis_cap 0 = off (None)
    icepop   r_t where cfg.icepop_low <= r_t <= cfg.icepop_high, else 0 (IcePop, Ring-1T): a token whose
             probabilities disagree too much is dropped from the gradient instead of being down-weighted
    seq-tis  min(exp(sum_t log r_t), cfg.tis_cap), the same for every token of a sequence: the sequence's own
             likelihood ratio pi_old(y) / pi_sampler(y), truncated. The exact importance weight of a
             sequence-level reward; the token ratios above ignore how the small per-token shifts of stale
             samples compound over a sequence (docs/scaling.md, async quality); tis_cap 0 = off (None)
Every entry reports the gap metrics (tis_ratio_mean, tis_ratio_max, logp_gap_max, logp_gap_mean) and the share of tokens it
clipped or masked (tis_clipped_frac). Padding is zeroed before any arithmetic and log-ratios are clamped to +-20,
so finite inputs give finite weights. Used by every policy loss through losses._finish; name: `algo.correction`.
"""
from __future__ import annotations

import torch

from codechat.algos.aggregation import masked_mean
from codechat.algos.kl import LOG_RATIO_CLAMP
from codechat.algos.registry import Registry

CORRECTIONS = Registry("off-policy correction", ("old_logp", "sampler_logp", "mask", "cfg"))


def _log_ratio(old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask > 0  # (B, T)
    gap = old_logp.detach() - sampler_logp.detach()  # (B, T)
    return torch.where(m, gap, torch.zeros_like(gap)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def gap_metrics(gap: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Token ratio mean and the log-prob gap (max and mean abs) over unmasked tokens of gap (B, T)."""
    return {
        "tis_ratio_mean": masked_mean(torch.exp(gap), mask).item(),
        "tis_ratio_max": torch.exp(gap).masked_fill(mask <= 0, 0.0).max().item() if (mask > 0).any() else 0.0,
        "logp_gap_max": gap.abs().max().item() if (mask > 0).any() else 0.0,
        "logp_gap_mean": masked_mean(gap.abs(), mask).item(),
    }


@CORRECTIONS.register("tis")
def truncated_is(old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                 cfg) -> tuple[torch.Tensor | None, dict[str, float]]:
    gap = _log_ratio(old_logp, sampler_logp, mask)  # (B, T)
    ratio = torch.exp(gap)  # (B, T)
    cap = cfg.tis_cap or 0.0  # None (not resolved by a stage: train/rl.py stage_algo) = off
    metrics = gap_metrics(gap, mask)
    metrics["tis_clipped_frac"] = masked_mean((ratio > cap).float(), mask).item() if cap > 0 else 0.0
    return (ratio.clamp(max=cap) if cap > 0 else None), metrics


@CORRECTIONS.register("seq-is")
def sequence_is(old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                cfg) -> tuple[torch.Tensor | None, dict[str, float]]:
    gap = _log_ratio(old_logp, sampler_logp, mask)  # (B, T)
    m = (mask > 0).float()  # (B, T)
    seq_log_ratio = (gap * m).sum(1) / m.sum(1).clamp(min=1)  # (B,) mean log ratio = log of the geometric mean
    return _sequence_weights(seq_log_ratio, gap, mask, cfg.tis_cap or 0.0)


def _sequence_weights(seq_log_ratio: torch.Tensor, gap: torch.Tensor, mask: torch.Tensor,
                      cap: float) -> tuple[torch.Tensor | None, dict[str, float]]:
    """One ratio per sequence (B,) from its log -> its capped value on every model token (B, T), and the metrics."""
    m = (mask > 0).float()  # (B, T)
    seq_ratio = torch.exp(seq_log_ratio)  # (B,)
    metrics = gap_metrics(gap, mask)
    rows = m.sum(1) > 0  # (B,)
    metrics["seq_ratio_mean"] = seq_ratio[rows].mean().item() if rows.any() else 0.0
    metrics["tis_clipped_frac"] = masked_mean((seq_ratio > cap).float()[:, None].expand_as(m), mask).item() \
        if cap > 0 else 0.0
    if cap <= 0:
        return None, metrics
    return seq_ratio.clamp(max=cap)[:, None].expand_as(m) * m, metrics  # (B, T)


@CORRECTIONS.register("icepop")
def icepop(old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
           cfg) -> tuple[torch.Tensor | None, dict[str, float]]:
    gap = _log_ratio(old_logp, sampler_logp, mask)  # (B, T)
    ratio = torch.exp(gap)  # (B, T)
    keep = (ratio >= cfg.icepop_low) & (ratio <= cfg.icepop_high) & (mask > 0)  # (B, T)
    metrics = gap_metrics(gap, mask)
    metrics["tis_clipped_frac"] = masked_mean((~keep).float(), mask).item()
    return torch.where(keep, ratio, torch.zeros_like(ratio)), metrics


@CORRECTIONS.register("seq-tis")
def sequence_tis(old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                 cfg) -> tuple[torch.Tensor | None, dict[str, float]]:
    gap = _log_ratio(old_logp, sampler_logp, mask)  # (B, T)
    m = (mask > 0).float()  # (B, T)
    seq_log_ratio = (gap * m).sum(1).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B,) log pi_old(y) / pi_sampler(y)
    return _sequence_weights(seq_log_ratio, gap, mask, cfg.tis_cap or 0.0)
