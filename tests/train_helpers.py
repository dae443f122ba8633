"""Shared by tests/test_dist.py and tests/test_train.py: fixed rollouts to run trainer updates on, without
sampling or verifying."""
from __future__ import annotations

import dataclasses

import torch

from codechat.policy import SampleBatch
from codechat.rollout.collect import Rollouts

P, G, T = 4, 3, 10  # the single-process batch: P prompts x G samples, completions up to T tokens


def fixed_rollouts(vocab: int) -> Rollouts:
    """P groups of G fixed completions with unequal lengths (the ranks' token counts differ)."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (3 + i,), generator=g).tolist() for i in range(P)]
    lens = torch.tensor([1, 2, 3, 9, 10, 10, 2, 1, 2, 4, 7, 8])[:P * G]  # (N,) first half shorter than the second
    mask = (torch.arange(T)[None] < lens[:, None]).float()  # (N, T)
    tokens = torch.randint(3, vocab, (P * G, T), generator=g) * mask.long()  # (N, T)
    batch = SampleBatch(torch.arange(P).repeat_interleave(G), tokens, mask, -torch.rand(P * G, T, generator=g) * mask,
                        ["stop"] * (P * G), [""] * (P * G), lens)
    rewards = torch.tensor([1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1.0])[:P * G]  # (N,)
    return Rollouts([None] * P, prompts, batch, [None] * (P * G), rewards)


def part(r: Rollouts, g0: int, g1: int) -> Rollouts:
    """Groups g0..g1 of r (what a rank samples), same padded length; g0 == g1 gives a rank with nothing."""
    rows = slice(g0 * G, g1 * G)
    b = r.batch
    batch = dataclasses.replace(b, prompt_index=b.prompt_index[rows] - g0, tokens=b.tokens[rows], mask=b.mask[rows],
                                logprobs=b.logprobs[rows], finish_reason=b.finish_reason[rows], texts=b.texts[rows],
                                n_tokens=b.n_tokens[rows])
    return Rollouts(r.tasks[g0:g1], r.prompts[g0:g1], batch, r.verdicts[rows], r.rewards[rows])
