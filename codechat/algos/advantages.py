"""Advantage estimators: rewards (B,) and group ids (B,) -> advantages (B,), one signature, in ADVANTAGES.

A group is the G samples drawn for one prompt; `group_ids` says which group each sample belongs to (any
integers, not necessarily contiguous). With r the rewards, mean/std taken over the sample's group:
    grpo            (r - mean) / (std + eps)         std: the group's (default), the batch's, or none (cfg.std_scale)
    grpo-mean-only  r - mean                         Dr. GRPO: no std division (no difficulty bias)
    rloo            r - mean of the other G-1        unbiased leave-one-out baseline; = G/(G-1) (r - mean)
    filter          1 if r >= filter_threshold else 0   rejection-sampling fine-tuning (RFT) as policy gradient
    batch-mean      (r - batch mean) / (batch std + eps)  one baseline shared by every prompt in the batch
                                                     (std_scale=none: no division)
Conventions: std is the unbiased (n-1) sample std, as in verl and TRL; a group of one sample has no baseline
to compare with and gets advantage 0 from grpo/rloo; a group whose rewards are all equal gets exactly 0
(never NaN, even with eps=0).

Also here: `zero_variance_groups` (groups that all pass or all fail carry no signal: skip or resample them) and
`DifficultyTracker` (a running pass rate per prompt -> per-sample weights that favour hard prompts), and
`placebo_advantages` (the advantages shuffled across the batch: the control of `codechat probe`).
"""
from __future__ import annotations

from typing import Sequence

import torch

from codechat import CodechatError
from codechat.algos.registry import Registry

ADVANTAGES = Registry("advantage estimator", ("rewards", "group_ids", "cfg"))
STD_SCALES = ("group", "batch", "none")


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor):
    """-> index (B,) of each sample's group in 0..K-1, and per group: count (K,), mean (K,), unbiased std (K,)."""
    _, idx = torch.unique(group_ids, return_inverse=True)  # (B,)
    K = int(idx.max()) + 1 if idx.numel() else 0
    count = torch.bincount(idx, minlength=K).to(rewards.dtype)  # (K,)
    mean = rewards.new_zeros(K).index_add_(0, idx, rewards) / count  # (K,)
    sq = rewards.new_zeros(K).index_add_(0, idx, (rewards - mean[idx]) ** 2)  # (K,)
    std = torch.where(count > 1, (sq / (count - 1).clamp_min(1)).sqrt(), torch.zeros_like(sq))  # (K,)
    return idx, count, mean, std


def _divide(centered: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """centered / (scale + eps), and 0 where scale is 0 (then centered is 0 too): no NaN even with eps=0."""
    return torch.where(scale > 0, centered / (scale + eps), torch.zeros_like(centered))


def _batch_std(rewards: torch.Tensor) -> torch.Tensor:
    return rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())


@ADVANTAGES.register("grpo")
def grpo(rewards: torch.Tensor, group_ids: torch.Tensor, cfg) -> torch.Tensor:
    idx, count, mean, std = group_stats(rewards, group_ids)
    centered = rewards - mean[idx]  # (B,)
    if cfg.std_scale == "group":
        return _divide(centered, std[idx], cfg.eps)
    if cfg.std_scale == "batch":
        return _divide(centered, _batch_std(rewards).expand_as(centered), cfg.eps)
    if cfg.std_scale == "none":
        return centered
    raise CodechatError(f"unknown std_scale {cfg.std_scale!r}; valid: {', '.join(STD_SCALES)}")


@ADVANTAGES.register("grpo-mean-only")
def grpo_mean_only(rewards: torch.Tensor, group_ids: torch.Tensor, cfg) -> torch.Tensor:
    idx, _, mean, _ = group_stats(rewards, group_ids)
    return rewards - mean[idx]  # (B,)


@ADVANTAGES.register("rloo")
def rloo(rewards: torch.Tensor, group_ids: torch.Tensor, cfg) -> torch.Tensor:
    idx, count, mean, _ = group_stats(rewards, group_ids)
    n = count[idx]  # (B,)
    others = (mean[idx] * n - rewards) / (n - 1).clamp_min(1)  # (B,) mean of the other n-1 rewards
    return torch.where(n > 1, rewards - others, torch.zeros_like(rewards))


@ADVANTAGES.register("filter")
def filter_(rewards: torch.Tensor, group_ids: torch.Tensor, cfg) -> torch.Tensor:
    return (rewards >= cfg.filter_threshold).to(rewards.dtype)  # (B,)


@ADVANTAGES.register("batch-mean")
def batch_mean(rewards: torch.Tensor, group_ids: torch.Tensor, cfg) -> torch.Tensor:
    centered = rewards - rewards.mean()  # (B,)
    if cfg.std_scale == "none":
        return centered
    return _divide(centered, _batch_std(rewards).expand_as(centered), cfg.eps)


def compute_advantages(name: str, rewards: torch.Tensor, group_ids: torch.Tensor, cfg,
                       *, weights: torch.Tensor | None = None) -> torch.Tensor:
    """ADVANTAGES[name](rewards (B,), group_ids (B,), cfg) -> (B,), times per-sample `weights` (B,) when given
    (e.g. DifficultyTracker.weights)."""
    if rewards.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(f"rewards and group_ids must be (B,), got {tuple(rewards.shape)}, {tuple(group_ids.shape)}")
    rewards = rewards.float() if not rewards.is_floating_point() else rewards
    adv = ADVANTAGES[name](rewards, group_ids, cfg)  # (B,)
    return adv if weights is None else adv * weights.to(adv)


def placebo_advantages(adv: torch.Tensor, rows: torch.Tensor, seed: int) -> torch.Tensor:
    """A copy of adv (N,) whose entries at `rows` (the samples the loss sees) are permuted among themselves by a
    seeded shuffle: the same multiset of advantages, so an update of the same size and shape, but each
    advantage lands on a sample other than the one it scored, so the reward carries no signal. The control
    arm of `codechat probe` (train/placebo.py): what an RL run gains beyond it is what the reward taught."""
    out = adv.clone()
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(rows), generator=g)  # (n,)
    out[rows] = adv[rows[perm]]
    return out


def zero_variance_groups(rewards: torch.Tensor, group_ids: torch.Tensor, tol: float = 1e-8):
    """-> (mask (B,) True where the sample's group has equal rewards (all pass / all fail), fraction of such groups).

    Such groups have zero grpo/rloo advantage: the trainer can skip them (DAPO dynamic sampling) or resample.
    A group of one sample counts as zero-variance.
    """
    rewards = rewards.float()
    _, idx = torch.unique(group_ids, return_inverse=True)  # (B,)
    K = int(idx.max()) + 1 if idx.numel() else 0
    hi = rewards.new_full((K,), -float("inf")).scatter_reduce(0, idx, rewards, "amax")  # (K,)
    lo = rewards.new_full((K,), float("inf")).scatter_reduce(0, idx, rewards, "amin")  # (K,)
    flat = (hi - lo) <= tol  # (K,)
    return flat[idx], (flat.float().mean().item() if K else 0.0)


class DifficultyTracker:
    """Running pass rate per prompt -> per-sample advantage weights (1 - p)^alpha, scaled to batch mean 1.

    alpha > 0 favours prompts the policy still fails (alpha = 0: all weights 1; alpha < 0 favours easy ones).
    Call `weights(task_ids)` before `update(task_ids, passed)` so a batch is weighted by its history.
    A prompt not seen yet has pass rate `prior`.
    """

    def __init__(self, alpha: float = 0.0, ema: float = 0.9, prior: float = 0.5):
        self.alpha, self.ema, self.prior = alpha, ema, prior
        self.rates: dict[str, float] = {}
        """task_id -> running pass rate (exponential moving average of per-step group pass rates)."""

    @classmethod
    def from_config(cls, cfg) -> "DifficultyTracker":
        return cls(alpha=cfg.difficulty_alpha, ema=cfg.difficulty_ema)

    def pass_rate(self, task_id: str) -> float:
        return self.rates.get(task_id, self.prior)

    def update(self, task_ids: Sequence[str], passed: Sequence[float]) -> None:
        """One entry per sample; the samples of a task are averaged, then folded into its running rate."""
        sums: dict[str, list[float]] = {}
        for t, p in zip(task_ids, passed, strict=True):
            s = sums.setdefault(t, [0.0, 0.0])
            s[0], s[1] = s[0] + float(p), s[1] + 1
        for t, (total, n) in sums.items():
            old = self.rates.get(t)
            self.rates[t] = total / n if old is None else self.ema * old + (1 - self.ema) * total / n

    def hardness(self, task_ids: Sequence[str]) -> torch.Tensor:
        """(B,) unnormalised weights (1 - p)^alpha (1 - p floored at 1e-3); ones when alpha is 0. The trainer
        normalises them over the samples of all ranks (train/dist.py `mean_one`)."""
        if self.alpha == 0 or not task_ids:
            return torch.ones(len(task_ids))
        h = torch.tensor([1.0 - self.pass_rate(t) for t in task_ids]).clamp_min(1e-3)  # (B,)
        return h ** self.alpha

    def weights(self, task_ids: Sequence[str]) -> torch.Tensor:
        """(B,) weights (1 - p)^alpha normalised to mean 1 over this batch; ones when alpha is 0."""
        w = self.hardness(task_ids)  # (B,)
        return w / w.mean() if w.numel() else w

    def state_dict(self) -> dict:
        return {"rates": dict(self.rates)}

    def load_state_dict(self, state: dict) -> None:
        self.rates = dict(state["rates"])
