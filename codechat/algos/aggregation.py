"""Loss aggregation: a per-token loss matrix (B, T) and its mask -> one scalar, by a named mode.

Modes (verl's names), with L the loss, m the 0/1 mask and |y_i| = sum_t m_it the length of sequence i:
    token-mean               sum_it L m / sum_it m                       every token weighs the same (DAPO)
    seq-mean-token-mean      mean_i ( sum_t L m / |y_i| )                the GRPO paper's 1/|y| per sequence
    seq-mean-token-sum       mean_i ( sum_t L m )
    seq-mean-token-sum-norm  mean_i ( sum_t L m ) / norm                 Dr. GRPO: a constant in place of |y_i|
    turn-mean                mean_k ( sum_{t in k} L / |k| )             every turn of an episode weighs the same
`mean_i` runs over the sequences with at least one unmasked token, so rows masked out whole (truncated or
filtered samples) do not dilute the rest. A turn k is a maximal run of unmasked tokens in a row (in an episode,
one model turn between two tool results) and `mean_k` runs over every turn of the batch: the loss SkyRL
(`generator.step_wise_trajectories` with `loss_reduction=sequence_mean`) and rLLM (`stepwise_advantage` with
`loss_agg_mode=seq-mean-token-mean`) compute with each turn a row of its own. On rows without holes (single
answers) it is seq-mean-token-mean. Padding never contributes, not even as NaN or inf: masked entries
are replaced by 0 before any arithmetic. An all-zero mask gives a loss of 0 (with zero gradients).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from codechat.algos.registry import Registry

AGG_MODES = Registry("loss aggregation mode", ("loss_mat", "mask", "norm"))


def _masked(loss_mat: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = mask > 0  # (B, T) bool
    return torch.where(m, loss_mat, torch.zeros_like(loss_mat)), m


def turn_starts(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: True on the first token of each maximal run of unmasked tokens (a turn) of mask (B, T)."""
    m = mask > 0
    return m & ~F.pad(m[:, :-1], (1, 0), value=False)


def _n_rows(m: torch.Tensor) -> torch.Tensor:
    return m.any(dim=-1).sum().clamp_min(1)  # () sequences with at least one token


@AGG_MODES.register("token-mean")
def token_mean(loss_mat: torch.Tensor, mask: torch.Tensor, norm: float) -> torch.Tensor:
    L, m = _masked(loss_mat, mask)
    return L.sum() / m.sum().clamp_min(1)


@AGG_MODES.register("seq-mean-token-mean")
def seq_mean_token_mean(loss_mat: torch.Tensor, mask: torch.Tensor, norm: float) -> torch.Tensor:
    L, m = _masked(loss_mat, mask)
    per_seq = L.sum(dim=-1) / m.sum(dim=-1).clamp_min(1)  # (B,) empty rows give 0
    return per_seq.sum() / _n_rows(m)


@AGG_MODES.register("seq-mean-token-sum")
def seq_mean_token_sum(loss_mat: torch.Tensor, mask: torch.Tensor, norm: float) -> torch.Tensor:
    L, m = _masked(loss_mat, mask)
    return L.sum(dim=-1).sum() / _n_rows(m)


@AGG_MODES.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(loss_mat: torch.Tensor, mask: torch.Tensor, norm: float) -> torch.Tensor:
    L, m = _masked(loss_mat, mask)
    denom = norm if norm > 0 else loss_mat.shape[-1]  # pass max_new_tokens: T varies from batch to batch
    return L.sum(dim=-1).sum() / _n_rows(m) / denom


@AGG_MODES.register("turn-mean")
def turn_mean(loss_mat: torch.Tensor, mask: torch.Tensor, norm: float) -> torch.Tensor:
    L, m = _masked(loss_mat, mask)
    start = turn_starts(m)  # (B, T)
    turn = (start.flatten().cumsum(0) - 1).clamp_min(0)  # (B*T,) turn index; turns never span rows
    sums = L.new_zeros(L.numel()).index_add(0, turn, L.flatten())  # (B*T,) masked entries add 0
    counts = L.new_zeros(L.numel()).index_add(0, turn, m.flatten().to(L.dtype))  # (B*T,)
    return (sums / counts.clamp_min(1)).sum() / start.sum().clamp_min(1)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, norm: float = 0) -> torch.Tensor:
    """loss_mat (B, T), mask (B, T) of 0/1 -> scalar, by `mode` (see the module docstring)."""
    if loss_mat.dim() != 2 or loss_mat.shape != mask.shape:
        raise ValueError(f"agg_loss wants loss_mat and mask of the same (B, T) shape, got {tuple(loss_mat.shape)} "
                         f"and {tuple(mask.shape)}")
    return AGG_MODES[mode](loss_mat, mask, float(norm))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x (B, T) over unmasked entries (a metric helper; 0 when nothing is unmasked)."""
    return token_mean(x, mask, 0.0)
