"""Supervised fine-tuning on (prompt, answer) pairs, loss on the answer tokens only. Also the improve step
of RFT, which fine-tunes on the model's own passing samples."""
from __future__ import annotations

import random
import time
import warnings

import torch

from codechat import CodechatError
from codechat.plugins import load_with
from codechat.policy import completion_logprobs
from codechat.policy.sampler import pad_rows
from codechat.rollout.collect import prompt_text
from codechat.rollout.expert import expert_episodes
from codechat.train import dist
from codechat.train.common import Context, end_step, grad_norm_clip, make_optimizer, restore, take
from codechat.train.context import drop_long, prompt_limit
from codechat.train.episodes import is_repo_batch, run_judge


def answer_ids(policy, text: str) -> list[int]:
    """Answer tokens as the sampler would produce them: the text's tokens, then EOS."""
    ids = policy.tokenizer.encode(text, add_special_tokens=False)
    eos = policy.tokenizer.eos_token_id
    return ids + ([eos] if eos is not None else [])


def sft_loss(policy, prompts: list[list[int]], answers: list[list[int]],
             masks: list[list[float]] | None = None) -> torch.Tensor:
    """Mean negative log-likelihood of the answer tokens given their prompts (token-mean). masks: per answer,
    1 on the tokens to learn (an episode's model tokens), 0 on the others (tool results: context only)."""
    tokens, mask, _ = pad_rows(answers, policy.tokenizer.pad_token_id or 0, masks)  # (B, T)
    tokens, mask = tokens.to(policy.device), mask.to(policy.device)
    idx = torch.arange(len(prompts), device=policy.device)
    with policy.autocast():  # model.compute_dtype
        logp = completion_logprobs(policy.model, prompts, idx, tokens, mask)  # (B, T)
    return -(logp * mask).sum() / mask.sum().clamp(min=1)


def sft_pairs(ctx: Context, tasks) -> list[tuple[str, str]]:
    pairs = [(prompt_text(t), t.solution) for t in tasks if t.solution]
    if not pairs:
        raise CodechatError(f"{ctx.cfg.data.sft or ctx.cfg.data.train}: no task has a reference solution for SFT")
    return pairs


def prefilled_examples(policy, tasks) -> list[tuple[list[int], list[int]]] | None:
    """(prompt ids, answer ids) of tasks with references when any carries metadata["prefill"] (a list of tags,
    tasks/thinking_sft.py): the tags' text, encoded whole, continues the prompt (context, not learned), as the
    balanced sampler forces it; None when no task has one (the plain text pairs)."""
    if not any("prefill" in t.metadata for t in tasks):
        return None
    out = []
    for t in tasks:
        if not t.solution:
            continue
        tags = t.metadata.get("prefill", [])
        if not isinstance(tags, list) or not all(isinstance(x, str) and x for x in tags):
            raise CodechatError(f"task {t.task_id}: metadata.prefill must be a list of non-empty strings, "
                                f"got {tags!r}")
        prefix = policy.tokenizer.encode("".join(tags), add_special_tokens=False) if tags else []
        out.append((policy.encode_prompt(prompt_text(t)) + prefix, answer_ids(policy, t.solution)))
    return out


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
        masks = [b[2] for b in batch] if batch and len(batch[0]) > 2 else None  # episodes: model tokens only
        loss = sft_loss(policy, [b[0] for b in batch], [b[1] for b in batch], masks)
        opt.zero_grad(set_to_none=True)
        tokens = sum(sum(b[2]) if masks else len(b[1]) for b in batch)  # token-mean over the batch of all ranks:
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
    if is_repo_batch(tasks):  # repository tasks: expert episodes, loss on their model tokens
        encoded = transcript_examples(ctx, tasks)
        train_on_pairs(ctx, [], c.steps, c.lr, c.batch_size, c.warmup, encoded=encoded)
        return
    tasks = drop_long(tasks, ctx.policy, prompt_limit(ctx.cfg, ctx.policy), "sft", with_solution=True)
    train_on_pairs(ctx, sft_pairs(ctx, tasks), c.steps, c.lr, c.batch_size, c.warmup,
                   encoded=prefilled_examples(ctx.policy, tasks))  # thinking: prefilled empty blocks


def warn_long_turns(episodes, turn_tokens: int) -> None:
    """One warning when expert turns are longer than the runtime's turn budget: SFT teaches turns (a whole file
    in one write_file) that a sampled turn, cut at `agent.turn_tokens`, can never finish."""
    lens = [u.model_end - u.model_start for e in episodes for u in e.transcript.turns]
    over = sum(n > turn_tokens for n in lens)
    if over:
        warnings.warn(f"sft: {over} of {len(lens)} expert turns are longer than agent.turn_tokens={turn_tokens} "
                      f"(longest {max(lens)} tokens); sampled turns are cut there: raise agent.turn_tokens",
                      stacklevel=2)


def transcript_examples(ctx: Context, tasks) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt ids, the rest of the transcript, its loss mask = model tokens) per expert episode; the count of
    transcripts, their wrong share and resolve rate are logged once (`sft/expert_*`)."""
    episodes = expert_episodes(ctx.policy, run_judge(ctx), tasks, ctx.cfg.agent, ctx.cfg.sft.expert_wrong,
                               ctx.cfg.seed, ctx.cfg.sft.expert_per_task, ctx.cfg.sft.expert_edit,
                               ctx.cfg.sft.expert_recover)
    if not episodes:
        raise CodechatError(f"{ctx.cfg.data.sft or ctx.cfg.data.train}: no repository task has a reference fix")
    warn_long_turns(episodes, ctx.cfg.agent.turn_tokens)
    out = []
    for e in episodes:
        t = e.transcript
        out.append((t.tokens[:t.prompt_len], t.tokens[t.prompt_len:], [float(m) for m in t.is_model[t.prompt_len:]]))
    n = len(episodes)
    ctx.logger.log({"sft/expert_transcripts": float(n), "sft/expert_resolved": sum(e.verdict.passed for e in episodes) / n,
                    "sft/expert_truncated": sum(bool(e.truncated) for e in episodes) / n,
                    "sft/expert_tokens_mean": sum(len(e.transcript.tokens) for e in episodes) / n},
                   step=ctx.state.global_step)
    return out


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
