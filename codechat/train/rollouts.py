"""The one place a training stage chooses between single answers and multi-turn episodes.

    r = collect_rollouts(ctx, engine, tasks, group_size=8, seed=ctx.step_seed())   # GRPO, RFT, DPO, the producer

Repository tasks run G episodes each (train/episodes.py); every other task gets G sampled answers
(rollout/collect.py). Both are verified and scored with the run's reward config (`ctx.cfg.rewards`), so every
stage sees the same rewards and the same `Rollouts`; single answers stream to the verifier while decoding when
`rollout.verify_while_decoding` is on.
"""
from __future__ import annotations

from typing import Callable

from codechat.rollout.collect import Rollouts, collect
from codechat.train.episodes import collect_episodes, is_repo_batch


def collect_rollouts(ctx, engine, tasks: list, group_size: int, seed: int, policy=None,
                     before_turn: Callable[[], int] | None = None) -> Rollouts:
    """G rollouts per task, acted by `policy` (default ctx.policy) through `engine`. before_turn: episodes only,
    called before every turn (`EpisodeRunner.run`'s hook: the policy version acting, or partial rollouts)."""
    policy = ctx.policy if policy is None else policy
    if is_repo_batch(tasks):
        return collect_episodes(ctx, engine, tasks, group_size, seed=seed, policy=policy, before_turn=before_turn)
    return collect(policy, engine, ctx.verifier, tasks, group_size, ctx.cfg.sampling, ctx.cfg.rewards, seed=seed,
                   stream=ctx.cfg.rollout.verify_while_decoding)


def pad_id(ctx) -> int:
    """The policy tokenizer's pad id (0 when it has none): what pads every ragged batch of this run."""
    p = ctx.policy.tokenizer.pad_token_id
    return 0 if p is None else int(p)
