"""DPO on (passing, failing) pairs from the same group: online from fresh rollouts, or offline from a
rollouts.jsonl written by an earlier run (`dpo.source: PATH`). The reference is the stage's starting weights.

Offline answers are re-encoded from the recorded text, with an EOS only where the sample really ended with one
(the record's `eos`): a truncated or stop-string sample gets none (records written before `eos` existed: none).

Repository tasks (online only): a group is G episodes of a task, a pair is a resolved and an unresolved episode,
and each side's log-prob is summed over its model tokens only; tool results are in the context, not scored
(an answer is then (token ids, model-token mask), as RFT keeps them).

    codechat train --config configs/dpo.yaml
"""
from __future__ import annotations

import random
import time

import torch

from codechat import CodechatError
from codechat.algos import dpo_loss
from codechat.io.jsonl import read_jsonl
from codechat.policy import Sampler, completion_logprobs, reference
from codechat.policy.fsdp import full_weights, idle_pass
from codechat.policy.sampler import pad_rows
from codechat.rollout.collect import prompt_text, rollout_metrics
from codechat.tasks.repo import RepoTask
from codechat.train import dist
from codechat.train.common import Context, end_step, grad_norm_clip, make_optimizer, reference_model, restore, \
    save_stage_start, take
from codechat.train.episodes import episode_metrics
from codechat.train.rollouts import collect_rollouts


def pairs_from_groups(groups: dict[str, tuple[list[int], list[list[int]], list[list[int]]]], seed: int):
    """(prompt ids, chosen ids, rejected ids): each passing sample paired with a failing one of its group."""
    rng, out = random.Random(seed), []
    for _, (prompt, good, bad) in sorted(groups.items()):
        for g in good:
            if bad:
                out.append((prompt, g, rng.choice(bad)))
    rng.shuffle(out)
    return out


def recorded_answer(policy, completion: str, eos: bool) -> list[int]:
    """The token ids of a recorded completion: its text's tokens, then EOS only when the sample ended with one."""
    ids = policy.tokenizer.encode(completion, add_special_tokens=False)
    eos_id = policy.tokenizer.eos_token_id
    return ids + ([eos_id] if eos and eos_id is not None else [])


def offline_pairs(ctx: Context, path: str):
    if any(isinstance(t, RepoTask) for t in ctx.train_tasks):  # a recorded episode's text does not give its tokens
        raise CodechatError(f"dpo.source: {path}: offline pairs need single-answer tasks; repository tasks "
                            f"({ctx.cfg.data.train}) are paired online (dpo.source=online)")
    by_id = {t.task_id: t for t in ctx.train_tasks}
    groups: dict[str, tuple[list[int], list, list]] = {}
    for where, rec in read_jsonl(path, what="dpo.source rollout file"):
        try:
            task = by_id.get(str(rec["task_id"]))
            key = f"{rec.get('step', 0)}/{rec['task_id']}"
            completion, passed, eos = str(rec["completion"]), bool(rec["passed"]), bool(rec.get("eos", False))
        except (KeyError, TypeError) as e:
            raise CodechatError(f"{where}: bad rollout record: missing or invalid field {e}") from None
        if task is None or rec.get("status") == "infra_error":  # a lost sandbox says nothing about the sample
            continue
        g = groups.setdefault(key, (ctx.policy.encode_prompt(prompt_text(task)), [], []))
        (g[1] if passed else g[2]).append(recorded_answer(ctx.policy, completion, eos))
    pairs = pairs_from_groups(groups, ctx.cfg.seed)
    if not pairs:
        raise CodechatError(f"{path}: no (passing, failing) pair from the same group for tasks in {ctx.cfg.data.train}")
    return pairs


def online_pairs(ctx: Context, sampler) -> tuple[list, dict]:
    c = ctx.cfg.dpo
    tasks = take(ctx.train_tasks, ctx.cfg.seed + ctx.state.stage_idx, ctx.state.data_pos, c.prompts_per_step)
    ctx.state.data_pos += len(tasks)
    tasks = dist.shard(tasks)
    ctx.policy.model.eval()
    with full_weights(ctx.policy.model):  # FSDP: sample from gathered weights
        r = collect_rollouts(ctx, sampler, tasks, c.group_size, seed=ctx.step_seed())
    groups: dict[str, tuple[list[int], list, list]] = {}
    for i, v in enumerate(r.verdicts):
        if v.status == "infra_error":  # not a failing answer: the verifier failed
            continue
        gi = int(r.group_ids[i])
        ids, mask = r.trained_tokens(i)
        g = groups.setdefault(str(gi).zfill(4), (r.prompts[gi], [], []))
        (g[1] if v.passed else g[2]).append((ids, mask) if mask is not None else ids)
    m = rollout_metrics(r) | (episode_metrics(r) if r.episodes else {})
    m["samples_drawn"] = len(r.verdicts)
    return pairs_from_groups(groups, ctx.step_seed())[:len(dist.shard(range(c.pairs_per_step)))], m


def answer_parts(answer) -> tuple[list[int], list[float]]:
    """An answer is token ids (every token scored) or, for an episode, (token ids, model-token mask)."""
    return answer if isinstance(answer, tuple) else (answer, [1.0] * len(answer))


def seq_logp(model, prompts, answers, pad_id) -> torch.Tensor:
    """Summed log-prob of each answer given its prompt over its scored tokens (`answer_parts`) -> (P,)."""
    dev = next(model.parameters()).device
    parts = [answer_parts(a) for a in answers]
    tokens, mask, _ = pad_rows([ids for ids, _ in parts], pad_id, [m for _, m in parts])  # (P, T)
    idx = torch.arange(len(prompts), device=dev)
    logp = completion_logprobs(model, prompts, idx, tokens.to(dev), mask.to(dev))  # (P, T)
    return (logp * mask.to(dev)).sum(-1)


def run_dpo(ctx: Context) -> None:
    c, model = ctx.cfg.dpo, ctx.policy.model
    save_stage_start(ctx)
    ref = reference_model(ctx)
    opt, sched = make_optimizer(model, c.lr, 0, c.steps, cosine=False, cfg=ctx.cfg.optim)
    restore(ctx, opt, sched)
    offline = None if c.source == "online" else offline_pairs(ctx, c.source)
    sampler, pad_id = Sampler(ctx.policy), ctx.policy.tokenizer.pad_token_id or 0
    while ctx.state.step < c.steps:
        metrics, samples = {}, 0
        if offline is not None:
            batch = dist.shard(take(offline, ctx.cfg.seed, ctx.state.step * c.pairs_per_step, c.pairs_per_step))
        else:
            batch, metrics = online_pairs(ctx, sampler)
            samples = metrics.pop("samples_drawn")
        t0 = time.perf_counter()
        model.train()
        total = dist.all_sum(len(batch))  # pairs over all ranks: the loss is their mean
        if total:
            opt.zero_grad(set_to_none=True)
            m = {}
        prompts = [b[0] for b in batch] * 2
        answers = [b[1] for b in batch] + [b[2] for b in batch]
        if total:  # every rank (FSDP: the reference gather is a collective)
            with torch.no_grad(), full_weights(ref), reference(ref), ctx.policy.autocast():
                ref_lp = seq_logp(ref, prompts, answers, pad_id) if batch else None  # (2P,)
        if total and not batch:
            idle_pass(model)  # FSDP: match the other ranks' forward/backward
        if batch:
            with ctx.policy.autocast():  # model.compute_dtype
                lp = seq_logp(model, prompts, answers, pad_id)  # (2P,)
            P = len(batch)
            n_tok = torch.tensor([sum(answer_parts(a)[1]) for a in answers[:P]],
                                 dtype=lp.dtype, device=lp.device)  # (P,) the scored tokens of each chosen side
            loss, m = dpo_loss(lp[:P], lp[P:], ref_lp[:P], ref_lp[P:], ctx.cfg.algo, chosen_tokens=n_tok)
            (loss * (P / total)).backward()
            m["loss"] = loss.item()
        if total:
            dist.sync_grads(model)
            m["grad_norm"] = grad_norm_clip(model, ctx.cfg.optim.max_grad_norm)
            opt.step()
            metrics.update({f"dpo/{k}" if k not in ("loss", "grad_norm") else k: float(v) for k, v in m.items()})
        else:
            metrics["skipped_update"] = 1.0
        metrics["lr"] = opt.param_groups[0]["lr"]  # this step's
        sched.step()
        metrics["dpo/pairs"] = len(batch)
        metrics["time/update_s"] = time.perf_counter() - t0
        end_step(ctx, metrics, c.steps, opt, sched, samples=samples)
