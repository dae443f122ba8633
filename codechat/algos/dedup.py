"""Duplicate-aware update: run the policy's forward/backward once per distinct completion, weighted by how often it
was sampled, with the same loss, metrics and gradient as the per-sample computation.

Small models on easy prompts sample the same completion many times per group (58.5% of the demo's GRPO samples
repeat another of their group). Two rows with the same prompt, the same tokens up to their last masked-in one and
the same mask get the same log-probs from the model, whatever their advantages or sampler log-probs. So the
trainer (train/rl.py `logprobs_for`) keys rows on exactly those three:

    d = find_duplicates(prompt_index, tokens, mask)                 # rows (N,) -> U distinct rows
    logp_u = completion_logprobs(model, ..., rows[d.keep])          # (U, T): the only model pass
    logp = expand(logp_u, d)                                        # (N, T), differentiable
    loss, metrics = policy_loss(..., logp, ...)                     # unchanged, on all N rows

The multiplicity is the weight, applied by autograd: `expand` is an index_select, whose backward sums the N rows'
gradients into their U distinct rows (an index_add), i.e. multiplies each distinct row's gradient by its count.
Because the loss is still evaluated on the N expanded rows, every aggregation mode, KL estimator, truncated IS and
metric (clip fractions, entropy, KL, ratios) is the per-sample one by construction, each row with its own
advantage and sampler log-probs, not a second weighted copy of each formula; what is saved is the model's forward and backward over the N - U duplicate rows (the (N, T)
elementwise loss is negligible next to it). Equal up to float summation order: tests/test_dedup_update.py checks
loss, metrics and gradients against the naive computation for every aggregation mode and loss.

What it does not merge: rows equal in text but not in tokens (another tokenisation), rows of different prompts
or masks (an episode's tool results, a forced prefix); those stay distinct, which is always exact.
`find_duplicates` also takes extra per-row tensors to key on (for a caller that merges whole loss terms).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Duplicates:
    """Which of N rows are copies of each other."""

    keep: torch.Tensor
    """(U,) long: the first row of each distinct row, in order of first occurrence."""
    inverse: torch.Tensor
    """(N,) long: for each row, the index (into keep) of the distinct row equal to it."""
    counts: torch.Tensor
    """(U,) long: multiplicity of each distinct row (sums to N)."""

    @property
    def n_rows(self) -> int:
        return len(self.inverse)

    @property
    def n_unique(self) -> int:
        return len(self.keep)

    @property
    def frac(self) -> float:
        """Fraction of rows that repeat an earlier one (the share of forward/backward work saved)."""
        return 1.0 - self.n_unique / self.n_rows if self.n_rows else 0.0


def find_duplicates(prompt_index: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                    *per_row: torch.Tensor) -> Duplicates:
    """Group rows with equal prompt_index (N,), tokens (N, T) up to each row's last masked-in token, mask (N, T),
    and equal values, bit for bit, in every extra per-row tensor (first dimension N, e.g. advantages (N,) or
    sampler log-probs (N, T)). Tokens after a row's last masked-in one are padding and ignored."""
    N = tokens.shape[0]
    if prompt_index.shape != (N,) or mask.shape != tokens.shape or any(x.shape[:1] != (N,) for x in per_row):
        raise ValueError(f"find_duplicates wants prompt_index (N,), tokens and mask (N, T) and per-row tensors "
                         f"(N, ...), got {tuple(prompt_index.shape)}, {tuple(tokens.shape)}, {tuple(mask.shape)}, "
                         f"{[tuple(x.shape) for x in per_row]}")
    real = (mask != 0).flip(1).cumsum(1).flip(1) > 0  # (N, T) up to the last masked-in token
    length = real.sum(1)  # (N,)
    tok, msk = tokens.detach().cpu(), mask.detach().cpu()
    extra = [x.detach().cpu().contiguous() for x in per_row]
    first: dict[tuple, int] = {}
    keep, inverse = [], []
    for i in range(N):
        n = int(length[i])
        key = (int(prompt_index[i]), tok[i, :n].numpy().tobytes(), msk[i, :n].numpy().tobytes(),
               *(x[i].numpy().tobytes() for x in extra))
        if key not in first:
            first[key] = len(keep)
            keep.append(i)
        inverse.append(first[key])
    inv = torch.tensor(inverse, dtype=torch.long)
    counts = torch.bincount(inv, minlength=len(keep)) if N else torch.zeros(0, dtype=torch.long)
    return Duplicates(torch.tensor(keep, dtype=torch.long), inv, counts)


def expand(x: torch.Tensor, d: Duplicates) -> torch.Tensor:
    """Per-distinct-row values (U, ...) -> per-row values (N, ...). Differentiable: the gradient that reaches x is
    the sum over each distinct row's copies (its multiplicity times one copy's), summed in a fixed order."""
    return x.index_select(0, d.inverse.to(x.device))
