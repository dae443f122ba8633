"""Shared by tests/test_dist.py, test_train.py and test_dedup_train.py: fixed rollouts to run trainer updates
on, without sampling or verifying, and a rank's share of them."""
from __future__ import annotations

import dataclasses
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp

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


def part(r: Rollouts, g0: int, g1: int, group: int = G) -> Rollouts:
    """Groups g0..g1 of r (what a rank samples), same padded length; g0 == g1 gives a rank with nothing.
    `group`: samples per prompt in r (G for fixed_rollouts)."""
    rows = slice(g0 * group, g1 * group)
    b = r.batch
    batch = dataclasses.replace(b, prompt_index=b.prompt_index[rows] - g0, tokens=b.tokens[rows], mask=b.mask[rows],
                                logprobs=b.logprobs[rows], finish_reason=b.finish_reason[rows], texts=b.texts[rows],
                                n_tokens=b.n_tokens[rows])
    return Rollouts(r.tasks[g0:g1], r.prompts[g0:g1], batch, r.verdicts[rows], r.rewards[rows])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(fn, *args, world: int = 2, deadline_s: float = 120) -> None:
    """fn(rank, world, port, *args) on `world` processes; fork (no re-import: ~10 s faster than spawn), and the
    test fails, the children killed, if they have not finished within deadline_s."""
    procs = mp.start_processes(fn, args=(world, free_port(), *args), nprocs=world, join=False, start_method="fork")
    deadline = time.monotonic() + deadline_s
    while not procs.join(timeout=1):
        if time.monotonic() > deadline:
            for p in procs.processes:
                p.kill()
            pytest.fail(f"the {world}-rank run did not finish in {deadline_s:.0f} s")
