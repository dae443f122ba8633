"""The maths of RL post-training as small pure functions on tensors, each in a registry reachable by a config name.

    advantages.py   ADVANTAGES:     rewards (B,), group_ids (B,), cfg -> advantages (B,)
    losses.py       POLICY_LOSSES:  logp, old_logp (B,T), advantages (B,), mask (B,T), cfg, *, sampler_logp
                                    -> (loss, metrics); plus dpo_loss on sequence-level pairs
    corrections.py  CORRECTIONS:    old_logp, sampler_logp, mask (B,T), cfg -> (weights (B,T) | None, metrics)
    kl.py           KL_ESTIMATORS:  logp, ref_logp (B,T) -> per-token KL (B,T)
    aggregation.py  AGG_MODES:      loss_mat, mask (B,T), norm -> scalar
Independent of models and sandboxes. `check_config(cfg)` resolves every name at startup, so a typo fails
before any sampling, with the list of valid names. Tests: `pytest tests/test_advantages.py tests/test_losses.py
tests/test_kl.py tests/test_aggregation.py`. The table of algorithms and when to use them: docs/algorithms.md.
"""
from __future__ import annotations

from codechat import CodechatError
from codechat.algos.advantages import (ADVANTAGES, STD_SCALES, DifficultyTracker, compute_advantages,
                                       group_stats, placebo_advantages, zero_variance_groups)
from codechat.algos.aggregation import AGG_MODES, agg_loss, masked_mean
from codechat.algos.kl import KL_ESTIMATORS, KL_NO_GRADIENT, kl_loss, kl_penalty
from codechat.algos.corrections import CORRECTIONS, truncated_is
from codechat.algos.losses import POLICY_LOSSES, dpo_loss, policy_loss
from codechat.algos.registry import Registry, UnknownNameError

__all__ = [
    "ADVANTAGES", "AGG_MODES", "CORRECTIONS", "KL_ESTIMATORS", "KL_NO_GRADIENT", "POLICY_LOSSES", "STD_SCALES", "DifficultyTracker", "Registry",
    "UnknownNameError", "agg_loss", "check_config", "compute_advantages", "dpo_loss", "group_stats", "kl_loss",
    "kl_penalty", "masked_mean", "placebo_advantages", "policy_loss", "truncated_is", "zero_variance_groups",
]


def check_config(cfg) -> None:
    """Fail early (CodechatError naming the field) on an unknown name or an out-of-range value in an AlgoConfig."""
    ADVANTAGES[cfg.advantage], POLICY_LOSSES[cfg.loss], KL_ESTIMATORS[cfg.kl_estimator], AGG_MODES[cfg.agg]
    CORRECTIONS[cfg.correction]
    # (the stage registry, train/stages.py, checks what depends on other sections: reinforce with rl.epochs > 1)
    problems = []
    if cfg.std_scale not in STD_SCALES:
        problems.append(f"std_scale {cfg.std_scale!r} is not one of {', '.join(STD_SCALES)}")
    if not (0 <= cfg.clip_low < 1 and cfg.clip_high >= 0):
        problems.append(f"clip_low must be in [0, 1) and clip_high >= 0, got {cfg.clip_low}, {cfg.clip_high}")
    if cfg.dual_clip != 0 and cfg.dual_clip <= 1:
        problems.append(f"dual_clip must be 0 (off) or > 1, got {cfg.dual_clip}")
    problems += [f"{name} must be >= 0, got {getattr(cfg, name)}" for name in ("tis_cap", "kl_beta", "eps", "agg_norm")
                 if (getattr(cfg, name) or 0) < 0]
    if not 0 <= cfg.dpo_label_smoothing < 0.5:
        problems.append(f"dpo_label_smoothing must be in [0, 0.5), got {cfg.dpo_label_smoothing}")
    if not 0 <= cfg.dpo_nll < float("inf"):  # NaN fails too
        problems.append(f"dpo_nll must be finite and >= 0, got {cfg.dpo_nll}")
    if cfg.kl_beta > 0 and cfg.kl_estimator in KL_NO_GRADIENT:
        problems.append(f"kl_estimator {cfg.kl_estimator!r} as a loss has an expected gradient of zero (it adds noise,"
                        f" not regularisation); use k2 or k3 with kl_beta > 0")
    if not 0 < cfg.icepop_low <= 1 <= cfg.icepop_high:
        problems.append(f"icepop_low and icepop_high must satisfy 0 < low <= 1 <= high, got {cfg.icepop_low},"
                        f" {cfg.icepop_high}")
    if not 0 <= cfg.difficulty_ema < 1:
        problems.append(f"difficulty_ema must be in [0, 1), got {cfg.difficulty_ema}")
    if problems:
        raise CodechatError("algo config: " + "; ".join(problems))
