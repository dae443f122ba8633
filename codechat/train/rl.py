"""GRPO / RLOO: on-policy RL from verifier rewards, one step read top to bottom:

sample -> verify -> reward -> advantage -> (old, reference log-probs) -> loss -> step -> log -> save.

Any advantage x policy loss of codechat.algos; stage `rloo` forces the rloo advantage. Inner epochs (mu > 1)
reuse the rollouts with the old log-probs and the clip; minibatches and gradient accumulation bound memory.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time

import torch

from codechat.algos.dedup import expand, find_duplicates
from codechat.rollout.collect import Rollouts, collect, rollout_metrics
from codechat.train import dist
from codechat.train.common import Context, end_step, grad_norm_clip, make_optimizer, reference_model, restore, \
    save_stage_start, take


def sample_groups(ctx: Context, sampler) -> tuple[Rollouts, dict]:
    """P groups for this step; with zero_variance=resample, draw more prompts until P groups have signal."""
    from codechat.algos import zero_variance_groups

    c, st = ctx.cfg.rl, ctx.state
    tasks = take(ctx.train_tasks, ctx.cfg.seed + st.stage_idx, st.data_pos, c.prompts_per_step)
    st.data_pos += len(tasks)  # global position: every rank takes the same prompts, then its slice
    tasks = dist.shard(tasks)
    r = collect(ctx.policy, sampler, ctx.verifier, tasks, c.group_size, ctx.cfg.sampling,
                ctx.cfg.rewards, seed=ctx.step_seed())
    extra = {"samples": len(r.verdicts)}
    zv, frac = zero_variance_groups(r.rewards, r.group_ids)
    extra["zero_var_frac"] = frac
    if c.zero_variance == "resample":
        rounds = 0
        while dist.any_true(bool(zv.any())) and rounds < c.resample_cap:  # all ranks: the same rounds
            rounds += 1
            more = take(ctx.train_tasks, ctx.cfg.seed + st.stage_idx, st.data_pos, c.prompts_per_step)
            st.data_pos += len(more)
            more = dist.shard(more)
            r2 = collect(ctx.policy, sampler, ctx.verifier, more, c.group_size, ctx.cfg.sampling,
                         ctx.cfg.rewards, seed=ctx.step_seed(salt=rounds))
            extra["samples"] += len(r2.verdicts)
            stats = r.verify_stats + r2.verify_stats if r.verify_stats and r2.verify_stats else None
            r = merge_keep_signal(r, r2, len(tasks))
            r.verify_stats = stats  # every round's verification
            zv, _ = zero_variance_groups(r.rewards, r.group_ids)
        extra["resample_rounds"] = rounds
    return r, extra


def merge_keep_signal(a: Rollouts, b: Rollouts, want: int) -> Rollouts:
    """Concatenate two rollout sets, keeping groups with reward variance first, up to `want` groups."""
    from codechat.algos import zero_variance_groups

    groups = []  # (has_signal, rollouts, group index)
    for r in (a, b):
        zv, _ = zero_variance_groups(r.rewards, r.group_ids)
        for gi in range(len(r.tasks)):
            rows = (r.group_ids == gi).nonzero().flatten()
            groups.append((not bool(zv[rows[0]]), r, gi, rows))
    keep = sorted(groups, key=lambda g: not g[0])[:want]
    return concat_groups(keep)


def concat_groups(groups) -> Rollouts:
    from codechat.train.common import pad

    first = groups[0][1]
    tasks, prompts, rows_meta = [], [], []
    tok, lp, masks, pidx, texts, fin, ntok, verdicts, rewards = [], [], [], [], [], [], [], [], []
    comps = {k: [] for k in first.components}
    for new_gi, (_, r, gi, rows) in enumerate(groups):
        tasks.append(r.tasks[gi])
        prompts.append(r.prompts[gi])
        for i in rows.tolist():
            n = int(r.batch.mask[i].sum())
            tok.append(r.batch.tokens[i, :n].tolist())
            lp.append(r.batch.logprobs[i, :n].tolist())
            pidx.append(new_gi)
            texts.append(r.batch.texts[i])
            fin.append(r.batch.finish_reason[i])
            ntok.append(int(r.batch.n_tokens[i]))
            verdicts.append(r.verdicts[i])
            rewards.append(float(r.rewards[i]))
            for k in comps:
                comps[k].append(float(r.components[k][i]))
    pad_id = int(first.batch.tokens[first.batch.mask == 0][0]) if (first.batch.mask == 0).any() else 0
    tokens, mask = pad(tok, pad_id)
    logprobs = torch.zeros_like(mask)
    for i, row in enumerate(lp):
        logprobs[i, :len(row)] = torch.tensor(row)
    batch = dataclasses.replace(first.batch, prompt_index=torch.tensor(pidx), tokens=tokens,
                                mask=mask.to(first.batch.mask.dtype), logprobs=logprobs, finish_reason=fin,
                                texts=texts, n_tokens=torch.tensor(ntok))
    return Rollouts(tasks, prompts, batch, verdicts, torch.tensor(rewards),
                    {k: torch.tensor(v) for k, v in comps.items()},
                    sum(g[1].sample_s for g in groups) / max(len(groups), 1),
                    sum(g[1].verify_s for g in groups) / max(len(groups), 1))


def logprobs_for(model, r: Rollouts, rows: torch.Tensor, temperature: float, with_entropy: bool = False,
                 dedup: bool = False, count: list | None = None):
    """Log-probs (n, T) of rows (and entropies). dedup: the model runs once per distinct (prompt, completion) row
    and the results are expanded back (algos/dedup.py: same values, gradients weighted by multiplicity).
    count: [rows asked, rows run], added to."""
    from codechat.policy import completion_logprobs

    dev = next(model.parameters()).device
    b = r.batch
    d = find_duplicates(b.prompt_index[rows], b.tokens[rows], b.mask[rows]) if dedup else None
    run = rows[d.keep] if d is not None else rows
    if count is not None:
        count[0], count[1] = count[0] + len(rows), count[1] + len(run)
    out = completion_logprobs(model, r.prompts, b.prompt_index[run].to(dev), b.tokens[run].to(dev),
                              b.mask[run].to(dev).float(), temperature=max(temperature, 1e-6) if temperature else 1.0,
                              with_entropy=with_entropy)
    if d is None:
        return out
    return tuple(expand(x, d) for x in out) if with_entropy else expand(out, d)  # (n, T) each


def rl_update(ctx: Context, r: Rollouts, adv: torch.Tensor, rows: torch.Tensor, ref, opt, sched) -> dict:
    """mu epochs x minibatches x grad-accumulation micro-batches of the policy loss (+ beta * KL)."""
    from codechat.algos import agg_loss, kl_penalty, policy_loss
    from codechat.policy.fsdp import full_weights, idle_pass, is_sharded

    c, a, model = ctx.cfg.rl, ctx.cfg.algo, ctx.policy.model
    temp, dev = ctx.cfg.sampling.temperature, ctx.device
    fsdp_on = is_sharded(model)
    mask = r.batch.mask[rows].to(dev).float()  # (N, T)
    one_pass = c.epochs == 1 and (not c.minibatch_size or c.minibatch_size >= len(rows))
    from codechat.policy import reference
    # (a rank may have no rows this step: it still joins the gradient sum, and under FSDP every gather)
    count = [0, 0]  # rows asked for, rows run through the model (rl.dedup: distinct ones only)
    with torch.no_grad(), full_weights(model):
        old = None if one_pass or not len(rows) else logprobs_for(model, r, rows, temp, dedup=c.dedup,
                                                                  count=count)  # (N, T)
    ref_lp = None
    if ref is not None:
        with torch.no_grad(), full_weights(ref), reference(ref):  # LoRA: adapters off; a frozen copy: no-op
            ref_lp = logprobs_for(ref, r, rows, temp, dedup=c.dedup, count=count) if len(rows) else None  # (N, T)
    mb = c.minibatch_size or max(len(rows), 1)
    n_mb = int(dist.all_max(-(-len(rows) // mb)))  # optimizer steps per epoch, the same on every rank
    sums: dict[str, float] = {}
    n_terms, gen = 0, torch.Generator().manual_seed(ctx.step_seed(7))
    for _ in range(c.epochs):
        perm = torch.randperm(len(rows), generator=gen) if c.epochs > 1 or mb < len(rows) else torch.arange(len(rows))
        for s in range(0, n_mb * mb, mb):
            mb_idx = perm[s:s + mb]
            opt.zero_grad(set_to_none=True)
            # each micro-batch weighs its share of what agg_loss divides by, over all ranks: exact grad accumulation
            units = dist.all_sum(dist.loss_units(mask[mb_idx], a.agg))
            micro = list(mb_idx.chunk(max(1, min(c.grad_accum, len(mb_idx)))))
            n_micro = int(dist.all_max(len(micro))) if fsdp_on else len(micro)
            for i in range(n_micro):  # FSDP: the same number of forward/backward passes on every rank
                m_idx = micro[i] if i < len(micro) else mb_idx[:0]
                if not len(m_idx):
                    idle_pass(model)
                    continue
                logp, ent = logprobs_for(model, r, rows[m_idx], temp, with_entropy=True, dedup=c.dedup,
                                         count=count)  # (n, T)
                m = mask[m_idx]
                old_lp = logp.detach() if old is None else old[m_idx]
                sampler_lp = r.batch.logprobs[rows[m_idx]].to(dev) if a.tis_cap > 0 else None
                loss, met = policy_loss(a.loss, logp, old_lp, adv[m_idx].to(dev), m, a, sampler_logp=sampler_lp)
                if ref_lp is not None:
                    kl = kl_penalty(logp, ref_lp[m_idx], a.kl_estimator)  # (n, T)
                    kl_term = agg_loss(kl, m, a.agg, a.agg_norm)
                    loss = loss + a.kl_beta * kl_term
                    met["kl"] = kl_term.item()
                (loss * (dist.loss_units(m, a.agg) / max(units, 1.0))).backward()
                met["loss"] = loss.item()
                met["entropy"] = ((ent * m).sum() / m.sum().clamp(min=1)).item()
                for k, v in met.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                n_terms += 1
            dist.sync_grads(model)
            sums["grad_norm"] = sums.get("grad_norm", 0.0) + grad_norm_clip(model, c.max_grad_norm) * len(micro)
            opt.step()
        sched.step()
    out = {k: v / max(n_terms, 1) for k, v in sums.items()}
    out["update/dedup_frac"] = 1.0 - count[1] / count[0] if count[0] else 0.0  # forward rows saved
    return out


def make_sampler(ctx: Context):
    """The rollout engine: codechat's sampler on the training model, or a colocated vLLM engine."""
    if ctx.cfg.rollout.engine == "vllm":
        from codechat.policy.vllm_engine import VLLMSampler
        from codechat.policy.fsdp import full_weights
        with full_weights(ctx.policy.model):  # FSDP: each rank's engine starts from the whole weights
            return VLLMSampler(ctx.policy, ctx.cfg.rollout, ctx.cfg.sampling)
    from codechat.policy import Sampler
    return Sampler(ctx.policy)


def run_rl(ctx: Context) -> None:
    from codechat.algos import zero_variance_groups
    from codechat.policy.fsdp import full_weights

    c = ctx.cfg.rl
    if ctx.stage == "rloo":
        ctx.cfg.algo = dataclasses.replace(ctx.cfg.algo, advantage="rloo")
    if ctx.cfg.algo.agg_norm == 0:  # Dr. GRPO's constant normaliser: the generation budget
        ctx.cfg.algo = dataclasses.replace(ctx.cfg.algo, agg_norm=float(ctx.cfg.sampling.max_new_tokens))
    a = ctx.cfg.algo
    if a.kl_beta > 0:
        save_stage_start(ctx)
    ref = reference_model(ctx) if a.kl_beta > 0 else None
    opt, sched = make_optimizer(ctx.policy.model, c.lr, c.warmup, c.steps, cosine=False)
    restore(ctx, opt, sched)
    sampler = make_sampler(ctx)
    if hasattr(sampler, "close"):
        ctx.on_close.append(sampler.close)
    while ctx.state.step < c.steps:
        # 1-3. sample, verify, reward
        ctx.policy.model.eval()
        # FSDP: gather once for the whole rollout (no-op otherwise); vLLM holds its own copy of the weights
        with full_weights(ctx.policy.model) if not hasattr(sampler, "update_weights") else contextlib.nullcontext():
            r, extra = sample_groups(ctx, sampler)
        metrics = rollout_metrics(r)
        metrics.update(extra)
        # 4. advantages (zero-variance groups: keep with zero advantage, or skip from the loss)
        adv = dist.batch_advantages(a.advantage, r.rewards, r.group_ids, a)  # (N,) batch statistics over all ranks
        rows = torch.arange(len(r.verdicts))
        if c.zero_variance != "keep":
            zv, _ = zero_variance_groups(r.rewards, r.group_ids)
            rows = rows[~zv]
        if c.mask_truncated:
            keep = torch.tensor([f != "length" for f in r.batch.finish_reason])
            rows = rows[keep[rows]]
        metrics["adv_abs_mean"] = adv.abs().mean().item()
        # 5-6. loss and optimizer steps
        t0 = time.perf_counter()
        ctx.policy.model.train()
        if dist.any_true(len(rows) > 0):
            metrics.update(rl_update(ctx, r, adv[rows], rows, ref, opt, sched))
        else:
            metrics["skipped_update"] = 1.0
        if hasattr(sampler, "update_weights"):  # vLLM: push the new weights in memory, no disk round trip
            with full_weights(ctx.policy.model):
                sampler.update_weights(ctx.policy.model)
        metrics["time/update_s"] = time.perf_counter() - t0
        save_rollouts(ctx, r)
        if ctx.cfg.log.audit:
            from codechat.rollout.audit import append_audit, audit_rollouts
            append_audit(ctx.run_dir, audit_rollouts(r, ctx.state.global_step, ctx.cfg.log.audit_top_k))
        # 7-8. log, evaluate, checkpoint
        end_step(ctx, metrics, c.steps, opt, sched, samples=extra["samples"])


def save_rollouts(ctx: Context, r: Rollouts) -> None:
    """Append this step's samples to rollouts.jsonl (offline DPO and audits read it)."""
    import json

    lines = [json.dumps({"step": ctx.state.global_step, "task_id": r.task_of(i).task_id, "group": int(r.group_ids[i]),
                         "completion": r.batch.texts[i], "reward": float(r.rewards[i]), "passed": v.passed,
                         "status": v.status}) + "\n" for i, v in enumerate(r.verdicts)]
    every = dist.gather(lines)  # every rank's samples, in rank order; rank 0 writes them
    if dist.is_main():
        with open(ctx.run_dir / "rollouts.jsonl", "a", encoding="utf-8") as f:
            f.writelines(line for rank_lines in every for line in rank_lines)
