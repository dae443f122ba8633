"""Supervised fine-tuning on (prompt, answer) pairs, loss on the answer tokens only. Also the improve step
of RFT, which fine-tunes on the model's own passing samples."""
from __future__ import annotations

import random
import time

import torch

from codechat import CodechatError
from codechat.plugins import load_with
from codechat.policy import completion_logprobs
from codechat.rollout.collect import prompt_text
from codechat.train import dist
from codechat.train.common import Context, end_step, grad_norm_clip, make_optimizer, pad, restore, take
from codechat.train.context import drop_long, prompt_limit


def answer_ids(policy, text: str) -> list[int]:
    """Answer tokens as the sampler would produce them: the text's tokens, then EOS."""
    ids = policy.tokenizer.encode(text, add_special_tokens=False)
    eos = policy.tokenizer.eos_token_id
    return ids + ([eos] if eos is not None else [])


def sft_loss(policy, prompts: list[list[int]], answers: list[list[int]]) -> torch.Tensor:
    """Mean negative log-likelihood of the answer tokens given their prompts (token-mean)."""
    tokens, mask = pad(answers, policy.tokenizer.pad_token_id or 0)  # (B, T)
    tokens, mask = tokens.to(policy.device), mask.to(policy.device)
    idx = torch.arange(len(prompts), device=policy.device)
    logp = completion_logprobs(policy.model, prompts, idx, tokens, mask)  # (B, T)
    return -(logp * mask).sum() / mask.sum().clamp(min=1)


def sft_pairs(ctx: Context, tasks) -> list[tuple[str, str]]:
    pairs = [(prompt_text(t), t.solution) for t in tasks if t.solution]
    if not pairs:
        raise CodechatError(f"{ctx.cfg.data.sft or ctx.cfg.data.train}: no task has a reference solution for SFT")
    return pairs


def train_on_pairs(ctx: Context, pairs, steps: int, lr: float, batch_size: int, warmup: int,
                   encoded: list[tuple[list[int], list[int]]] | None = None, start: int = 0) -> None:
    """The SFT loop over a fixed list of (prompt, answer) texts or pre-encoded (prompt ids, answer ids), from
    stage step `start` to `start + steps` (RFT runs one such loop per round, with a fresh optimizer)."""
    policy = ctx.policy
    if encoded is None:
        encoded = [(policy.encode_prompt(p), answer_ids(policy, a)) for p, a in pairs]
    opt, sched = make_optimizer(policy.model, lr, warmup, steps, cosine=True, cfg=ctx.cfg.optim)
    restore(ctx, opt, sched)
    policy.model.train()
    seed = ctx.cfg.seed + ctx.state.stage_idx + 7 * start
    while ctx.state.step < start + steps:
        t0 = time.perf_counter()
        batch = dist.shard(take(encoded, seed, (ctx.state.step - start) * batch_size, batch_size))
        loss = sft_loss(policy, [b[0] for b in batch], [b[1] for b in batch])
        opt.zero_grad(set_to_none=True)
        tokens = sum(len(b[1]) for b in batch)  # token-mean over the whole batch of all ranks:
        (loss * (tokens / max(dist.all_sum(tokens), 1.0))).backward()
        dist.sync_grads(policy.model)
        gn = grad_norm_clip(policy.model, ctx.cfg.optim.max_grad_norm)
        lr = opt.param_groups[0]["lr"]  # the lr of this step
        opt.step()
        sched.step()
        end_step(ctx, {"loss": loss.item(), "grad_norm": gn, "lr": lr, "time/update_s": time.perf_counter() - t0},
                 start + steps, opt, sched)


def run_sft(ctx: Context) -> None:
    c = ctx.cfg.sft
    d = ctx.cfg.data
    tasks = load_with(d.loader, d.sft, d.format or None) if d.sft else ctx.train_tasks
    tasks = drop_long(tasks, ctx.policy, prompt_limit(ctx.cfg, ctx.policy), "sft", with_solution=True)
    train_on_pairs(ctx, sft_pairs(ctx, tasks), c.steps, c.lr, c.batch_size, c.warmup)


def dedupe(items: list, key) -> list:
    seen, out = set(), []
    for it in items:
        k = key(it)
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


def shuffled(items: list, seed: int) -> list:
    items = list(items)
    random.Random(seed).shuffle(items)
    return items
