"""Policy losses (one signature, in POLICY_LOSSES), truncated importance sampling, and the DPO loss.

    fn(logp (B,T), old_logp (B,T), advantages (B,), mask (B,T), cfg, *, sampler_logp=None) -> (loss, metrics)

logp are the trainer's log-probs of the sampled tokens (with grad), old_logp the same before this step's updates
(no grad; equal to logp.detach() on the first inner epoch), advantages one per sequence, mask 1 on completion
tokens. The per-token loss is aggregated by cfg.agg (see aggregation.py); metrics are plain floats.
    ppo-clip   max(-A r, -A clip(r, 1-clip_low, 1+clip_high)), r = exp(logp - old_logp); with dual_clip c > 1
               the loss of A < 0 tokens is also capped at -A c. At r = 1 its gradient equals reinforce's.
    reinforce  -A logp (plain policy gradient: no ratio, no clip; the seed design of RLOO)
    gspo       ppo-clip on the sequence ratio s = exp(mean_t (logp - old_logp)) (GSPO: the geometric mean of the
               token ratios), one clip decision per sequence, the surrogate spread over its tokens
    cispo      -sg(clip(r, 1-clip_low, 1+clip_high)) A logp (CISPO, MiniMax-M1): the IS weight is clipped and
               detached, so every token keeps a gradient, unlike ppo-clip which zeroes clipped tokens
Off-policy correction (`sampler_logp` given): when rollouts come from another engine (vLLM) or older weights,
each token's loss is weighted by CORRECTIONS[cfg.correction] (corrections.py: tis, seq-is, icepop), detached.
Gap metrics are reported whenever sampler_logp is given, even with the correction off.
Padding never contributes: masked entries are zeroed before any arithmetic, and log-ratios are clamped to
+-20 before exp, so finite inputs always give a finite loss and gradients.

DPO works on sequence-level pairs, not on (B, T) tokens, so it is a separate function: `dpo_loss`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from codechat.algos.aggregation import agg_loss, masked_mean
from codechat.algos.corrections import CORRECTIONS
from codechat.algos.kl import LOG_RATIO_CLAMP
from codechat.algos.registry import Registry

POLICY_LOSSES = Registry("policy loss", ("logp", "old_logp", "advantages", "mask", "cfg", "sampler_logp"))


def _zero_padding(mask: torch.Tensor, *xs: torch.Tensor) -> list[torch.Tensor]:
    m = mask > 0  # (B, T)
    return [torch.where(m, x, torch.zeros_like(x)) for x in xs]


def _finish(loss_mat: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, cfg,
            sampler_logp: torch.Tensor | None, metrics: dict[str, float]) -> tuple[torch.Tensor, dict[str, float]]:
    """Apply the off-policy correction cfg.correction when asked, aggregate by cfg.agg, add the gap metrics and the loss value."""
    if sampler_logp is not None:
        w, tis_metrics = CORRECTIONS[cfg.correction](old_logp, sampler_logp, mask, cfg)
        if w is not None:
            loss_mat = loss_mat * w  # (B, T)
        metrics.update(tis_metrics)
    loss = agg_loss(loss_mat, mask, cfg.agg, cfg.agg_norm)
    metrics["pg_loss"] = loss.item()
    return loss, metrics


@POLICY_LOSSES.register("ppo-clip")
def ppo_clip(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cfg,
             *, sampler_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    logp, old = _zero_padding(mask, logp, old_logp.detach())
    log_ratio = (logp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    A = advantages.detach()[:, None]  # (B, 1)
    lo, hi = 1 - cfg.clip_low, 1 + cfg.clip_high
    surr = -A * ratio  # (B, T)
    surr_clipped = -A * ratio.clamp(lo, hi)  # (B, T)
    loss_mat = torch.where(surr_clipped > surr, surr_clipped, surr)  # (B, T) the pessimistic bound
    if cfg.dual_clip > 0:
        bound = -A * cfg.dual_clip  # (B, 1) caps the loss of A < 0 tokens whose ratio exploded
        dual = (A < 0) & (loss_mat > bound)  # (B, T)
        loss_mat = torch.where(dual, bound.expand_as(loss_mat), loss_mat)
    r = ratio.detach()
    metrics = {
        "clip_frac_low": masked_mean(((r < lo) & (A < 0)).float(), mask).item(),
        "clip_frac_high": masked_mean(((r > hi) & (A > 0)).float(), mask).item(),
        "ratio_mean": masked_mean(r, mask).item(),
        "approx_kl_old": masked_mean(-log_ratio.detach(), mask).item(),
    }
    if cfg.dual_clip > 0:
        metrics["dual_clip_frac"] = masked_mean(dual.float(), mask).item()
    return _finish(loss_mat, old_logp, mask, cfg, sampler_logp, metrics)


@POLICY_LOSSES.register("reinforce")
def reinforce(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cfg,
              *, sampler_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    logp, old = _zero_padding(mask, logp, old_logp.detach())
    loss_mat = -advantages.detach()[:, None] * logp  # (B, T)
    ratio = torch.exp((logp.detach() - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (B, T) for monitoring
    return _finish(loss_mat, old_logp, mask, cfg, sampler_logp, {"ratio_mean": masked_mean(ratio, mask).item()})


@POLICY_LOSSES.register("gspo")
def gspo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cfg,
         *, sampler_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    logp, old = _zero_padding(mask, logp, old_logp.detach())
    m = (mask > 0).float()  # (B, T)
    seq_log_ratio = ((logp - old) * m).sum(1) / m.sum(1).clamp(min=1)  # (B,)
    s = torch.exp(seq_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (B,) geometric-mean ratio
    A = advantages.detach()  # (B,)
    lo, hi = 1 - cfg.clip_low, 1 + cfg.clip_high
    surr = torch.maximum(-A * s, -A * s.clamp(lo, hi))  # (B,) the pessimistic bound per sequence
    loss_mat = surr[:, None] * m  # (B, T) each token carries its sequence's surrogate
    sd, rows = s.detach(), m.sum(1) > 0
    n = max(int(rows.sum()), 1)
    metrics = {
        "clip_frac_low": (((sd < lo) & (A < 0) & rows).float().sum() / n).item(),
        "clip_frac_high": (((sd > hi) & (A > 0) & rows).float().sum() / n).item(),
        "ratio_mean": (sd * rows).sum().item() / n,
    }
    return _finish(loss_mat, old_logp, mask, cfg, sampler_logp, metrics)


@POLICY_LOSSES.register("cispo")
def cispo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cfg,
          *, sampler_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    logp, old = _zero_padding(mask, logp, old_logp.detach())
    r = torch.exp((logp.detach() - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (B, T) detached ratio
    lo, hi = 1 - cfg.clip_low, 1 + cfg.clip_high
    w = r.clamp(lo, hi)  # (B, T) the clipped IS weight, no gradient
    loss_mat = -w * advantages.detach()[:, None] * logp  # (B, T)
    metrics = {
        "clip_frac_low": masked_mean((r < lo).float(), mask).item(),
        "clip_frac_high": masked_mean((r > hi).float(), mask).item(),
        "ratio_mean": masked_mean(r, mask).item(),
    }
    return _finish(loss_mat, old_logp, mask, cfg, sampler_logp, metrics)


def policy_loss(name: str, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, cfg, *, sampler_logp: torch.Tensor | None = None):
    """POLICY_LOSSES[name](...) -> (scalar loss, metrics dict[str, float])."""
    if logp.dim() != 2 or logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"logp, old_logp and mask must share a (B, T) shape, got {tuple(logp.shape)}, "
                         f"{tuple(old_logp.shape)}, {tuple(mask.shape)}")
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must be (B,) = {tuple(logp.shape[:1])}, got {tuple(advantages.shape)}")
    return POLICY_LOSSES[name](logp, old_logp, advantages, mask, cfg, sampler_logp=sampler_logp)


def dpo_loss(chosen_logp: torch.Tensor, rejected_logp: torch.Tensor, ref_chosen_logp: torch.Tensor,
             ref_rejected_logp: torch.Tensor, cfg, chosen_tokens: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO on P pairs of sequence-level (summed over tokens) log-probs (P,) each; beta = cfg.dpo_beta.

    h = beta ((chosen - ref_chosen) - (rejected - ref_rejected));
    loss = mean( -(1 - ls) log sigmoid(h) - ls log sigmoid(-h) ), ls = cfg.dpo_label_smoothing (cDPO);
    with cfg.dpo_nll = a > 0, plus a * mean(-chosen / chosen_tokens) (RPO; chosen_tokens (P,): the tokens each
    chosen log-prob sums over).
    """
    beta, ls = cfg.dpo_beta, cfg.dpo_label_smoothing
    chosen_reward = beta * (chosen_logp - ref_chosen_logp)  # (P,)
    rejected_reward = beta * (rejected_logp - ref_rejected_logp)  # (P,)
    h = chosen_reward - rejected_reward  # (P,)
    losses = -(1 - ls) * F.logsigmoid(h) - ls * F.logsigmoid(-h)  # (P,)
    loss = losses.mean() if losses.numel() else losses.sum()
    nll = None
    if cfg.dpo_nll > 0:
        if chosen_tokens is None or chosen_tokens.shape != chosen_logp.shape:
            raise ValueError("dpo_nll > 0 needs chosen_tokens (P,): the tokens each chosen log-prob sums over")
        nll = -(chosen_logp / chosen_tokens.clamp(min=1)).mean() if losses.numel() else chosen_logp.sum()
        loss = loss + cfg.dpo_nll * nll
    cr, rr = chosen_reward.detach(), rejected_reward.detach()
    n = max(losses.numel(), 1)
    metrics = {
        "dpo_loss": loss.item(),
        "dpo_reward_chosen": cr.sum().item() / n,
        "dpo_reward_rejected": rr.sum().item() / n,
        "dpo_reward_margin": (cr - rr).sum().item() / n,
        "dpo_reward_accuracy": (cr > rr).float().sum().item() / n,
    }
    if nll is not None:
        metrics["dpo_nll"] = nll.item()
    return loss, metrics
