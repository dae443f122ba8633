"""A step's groups for the RL loop: P prompts at the global data position, this rank's slice of them, G samples
each, verified and scored; with `rl.zero_variance: resample`, more prompts until P groups carry signal.

`sample_groups(ctx, engine) -> (Rollouts, metrics)` is the one producer of a step's rollouts: a multi-turn
episode rollout or an asynchronous producer replaces it with anything that returns the same `Rollouts`.
"""
from __future__ import annotations

import dataclasses

import torch

from codechat.algos import zero_variance_groups
from codechat.policy.sampler import pad_rows
from codechat.rollout.collect import Rollouts
from codechat.train import dist
from codechat.train.common import Context, take
from codechat.train.episodes import episode_metrics
from codechat.train.rollouts import collect_rollouts, pad_id


def sample_groups(ctx: Context, engine) -> tuple[Rollouts, dict]:
    """P groups for this step; with zero_variance=resample, draw more prompts until P groups have signal.
    metrics: samples drawn, zero_var_frac_first (of the first draw) and resample_rounds."""
    c, st = ctx.cfg.rl, ctx.state

    def draw(salt: int) -> Rollouts:
        tasks = take(ctx.train_tasks, ctx.cfg.seed + st.stage_idx, st.data_pos, c.prompts_per_step)
        st.data_pos += len(tasks)  # global position: every rank takes the same prompts, then its slice
        return collect_rollouts(ctx, engine, dist.shard(tasks), c.group_size, seed=ctx.step_seed(salt=salt),
                                before_turn=lambda: st.step)  # episodes, every turn: this step's policy version

    r = draw(0)
    want = len(r.tasks)
    zv, frac = zero_variance_groups(r.rewards, r.group_ids)
    extra = {"samples": len(r.verdicts), "zero_var_frac_first": frac}
    if c.zero_variance == "resample":
        rounds = 0
        while dist.any_true(bool(zv.any())) and rounds < c.resample_cap:  # all ranks: the same rounds
            rounds += 1
            more = draw(rounds)
            extra["samples"] += len(more.verdicts)
            stats = r.verify_stats + more.verify_stats if r.verify_stats and more.verify_stats else None
            r = merge_keep_signal(r, more, want, pad_id(ctx))
            r.verify_stats = stats  # every round's verification (verify/dedup_frac, ...)
            zv, _ = zero_variance_groups(r.rewards, r.group_ids)
        extra["resample_rounds"] = rounds
    if r.episodes:
        extra.update(episode_metrics(r))
    return r, extra


def merge_keep_signal(a: Rollouts, b: Rollouts, want: int, pad_id: int) -> Rollouts:
    """Concatenate two rollout sets, keeping groups with reward variance first, up to `want` groups."""
    groups = []  # (has_signal, rollouts, group index, rows)
    for r in (a, b):
        zv, _ = zero_variance_groups(r.rewards, r.group_ids)
        for gi in range(len(r.tasks)):
            rows = (r.group_ids == gi).nonzero().flatten()
            groups.append((not bool(zv[rows[0]]), r, gi, rows))
    keep = sorted(groups, key=lambda g: not g[0])[:want]
    return concat_groups(keep, pad_id)


def concat_groups(groups, pad_id: int) -> Rollouts:
    """(has_signal, rollouts, group index, rows) entries -> one Rollouts holding those groups, re-padded with
    `pad_id`."""
    first = groups[0][1]
    tasks, prompts = [], []
    tok, lp, pidx, texts, fin, ntok, verdicts, rewards, eps = [], [], [], [], [], [], [], [], []
    comps = {k: [] for k in first.components}
    for new_gi, (_, r, gi, rows) in enumerate(groups):
        tasks.append(r.tasks[gi])
        prompts.append(r.prompts[gi])
        for i in rows.tolist():
            n = int(r.batch.n_tokens[i])  # the row's length (an episode's mask has holes: tool results)
            tok.append(r.batch.tokens[i, :n].tolist())
            lp.append(r.batch.logprobs[i, :n].tolist())
            pidx.append(new_gi)
            texts.append(r.batch.texts[i])
            fin.append(r.batch.finish_reason[i])
            ntok.append(int(r.batch.n_tokens[i]))
            verdicts.append(r.verdicts[i])
            rewards.append(float(r.rewards[i]))
            if r.episodes:
                eps.append(r.episodes[i])
            for k in comps:
                comps[k].append(float(r.components[k][i]))
    masks = [r.batch.mask[i, :int(r.batch.n_tokens[i])].tolist() for _, r, _, rows in groups for i in rows.tolist()]
    tokens, mask, logprobs = pad_rows(tok, pad_id, masks, lp)  # (N, T); each row's own mask (holes on an
    # episode's tool results)
    batch = dataclasses.replace(first.batch, prompt_index=torch.tensor(pidx), tokens=tokens,
                                mask=mask.to(first.batch.mask.dtype), logprobs=logprobs, finish_reason=fin,
                                texts=texts, n_tokens=torch.tensor(ntok))
    return Rollouts(tasks, prompts, batch, verdicts, torch.tensor(rewards),
                    {k: torch.tensor(v) for k, v in comps.items()},
                    sum(g[1].sample_s for g in groups) / max(len(groups), 1),
                    sum(g[1].verify_s for g in groups) / max(len(groups), 1), episodes=eps,
                    tools_s=sum(g[1].tools_s for g in groups) / max(len(groups), 1),
                    episode_wall_s=sum(g[1].episode_wall_s for g in groups) / max(len(groups), 1),
                    verify_wait_s=sum(g[1].verify_wait_s for g in groups) / max(len(groups), 1),
                    judge_calls=sum(g[1].judge_calls for g in groups), judge_hits=sum(g[1].judge_hits for g in groups))
