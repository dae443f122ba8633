"""GRPO / RLOO: on-policy RL from verifier rewards, one step read top to bottom:

sample -> verify -> reward -> advantage -> (old, reference log-probs) -> loss -> step -> log -> save.

Any advantage x policy loss of codechat.algos; stage `rloo` uses the rloo advantage (for that stage only: the
run's `algo` section is never modified). Inner epochs (mu > 1) reuse the rollouts with the old log-probs and the
clip; `rl.minibatch_size` samples (over all ranks) per optimizer step; gradient accumulation bounds memory.
`algo.difficulty_alpha` weights advantages by a running per-prompt pass rate kept in the checkpointed state.

Rollouts come from one of two places, both returning the same `Rollouts`:
- `sample_groups` (train/groups.py) samples this step's groups with the current weights: single answers, or
  for repository tasks G multi-turn episodes per task (train/episodes.py), whose `batch.tokens` hold the model
  turns and tool results and whose `batch.mask` is 1 on the model's tokens only;
- with `rl.async_steps = k > 0`, `AsyncProducer` (train/producer.py) samples up to k batches ahead in a thread
  with older weights; `batch.logprobs` are then the behaviour policy's, which the log-prob gap metrics and the
  off-policy correction (`algo.tis_cap`, on by default under async) use.
Everything from the advantages on reads only `Rollouts` and the loss mask; `rl_update` takes the rows to train
on and their advantages, whatever produced them.

    codechat train --config configs/grpo.yaml
"""
from __future__ import annotations

import contextlib
import dataclasses
import time

import torch

from codechat.algos import DifficultyTracker, kl_loss, placebo_advantages, policy_loss, zero_variance_groups
from codechat.algos.dedup import expand, find_duplicates
from codechat.config import AlgoConfig, RunConfig
from codechat.policy import completion_logprobs, reference
from codechat.policy.engine import make_engine, push_weights, sampling_weights
from codechat.policy.fsdp import full_weights, idle_pass
from codechat.rollout.audit import append_audit, audit_rollouts
from codechat.rollout.collect import Rollouts, rollout_metrics, rollout_records
from codechat.rollout.thinking import behaviour_logprobs
from codechat.train import dist
from codechat.train.common import Context, end_step, frozen_table, grad_norm_clip, make_optimizer, reference_model, \
    restore, save_stage_start, schedule_step
from codechat.train.episodes import is_repo_batch, model_token_budget
from codechat.train.groups import sample_groups
from codechat.train.probe import GapProbe
from codechat.train.producer import AsyncProducer, check_async
from codechat.train.thinking import ThinkingHooks


ASYNC_TIS_CAP = 2.0
"""algo.tis_cap when unset and rl.async_steps > 0: batches sampled with older weights are weighted by
min(pi_old / pi_behaviour, 2), the capped correction of decoupled PPO (AReaL) and prime-rl."""


def stage_algo(cfg: RunConfig, stage: str, tasks=()) -> AlgoConfig:
    """The algorithm settings of an RL stage, as a copy (the run's config is left as it is): stage `rloo` uses
    the rloo advantage; agg_norm 0 becomes the generation budget (Dr. GRPO's constant normaliser:
    sampling.max_new_tokens, or for repository `tasks` the largest episode's model-token budget); an unset
    tis_cap becomes ASYNC_TIS_CAP under rl.async_steps > 0, else 0 (off)."""
    a = cfg.algo
    if stage == "rloo":
        a = dataclasses.replace(a, advantage="rloo")
    if a.tis_cap is None:
        a = dataclasses.replace(a, tis_cap=ASYNC_TIS_CAP if cfg.rl.async_steps > 0 else 0.0)
    if a.agg_norm == 0:
        budget = max(model_token_budget(t, cfg.agent) for t in tasks) if is_repo_batch(tasks) else \
            cfg.sampling.max_new_tokens
        a = dataclasses.replace(a, agg_norm=float(budget))
    return a


def logprobs_for(model, r: Rollouts, rows: torch.Tensor, temperature: float, with_entropy: bool = False,
                 dedup: bool = False, count: list | None = None):
    """Log-probs (n, T) of rows (and entropies). dedup: the model runs once per distinct (prompt, completion) row
    and the results are expanded back (algos/dedup.py: same values, gradients weighted by multiplicity).
    count: [rows asked, rows run], added to."""
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


def frozen_logprobs(model, r: Rollouts, rows: torch.Tensor, temperature: float, as_reference: bool = False,
                    dedup: bool = False, count: list | None = None) -> torch.Tensor | None:
    """No-grad log-probs (N, T) of the rows under `model`: the policy before the update, or with as_reference the
    reference (a LoRA policy with its adapters off; a frozen copy as it is). Every rank enters (FSDP gathers);
    a rank without rows gets None. dedup, count: as in logprobs_for."""
    with torch.no_grad(), full_weights(model), reference(model) if as_reference else contextlib.nullcontext():
        return logprobs_for(model, r, rows, temperature, dedup=dedup, count=count) if len(rows) else None


def old_logprobs(model, r: Rollouts, rows: torch.Tensor, first: torch.Tensor, temperature: float, dedup: bool,
                 count: list) -> torch.Tensor:
    """pi_old's log-probs (N, T) of rows, for an update of several optimizer steps. The rows of the first step
    (positions `first`) are left at 0: rl_update fills them from that step's own forward (detached), which runs
    before any weight changes, so the no-grad pass runs only over the other rows (none when every epoch is one
    minibatch: the first epoch's forward is the old pass)."""
    old = torch.zeros(r.batch.mask[rows].shape, device=next(model.parameters()).device)  # (N, T)
    rest = torch.ones(len(rows), dtype=torch.bool)
    rest[first] = False
    rest = rest.nonzero()[:, 0]  # (n,) positions not in the first step
    if dist.any_true(len(rest) > 0):  # every rank enters when any has rows (FSDP gathers)
        lp = frozen_logprobs(model, r, rows[rest], temperature, dedup=dedup, count=count)  # (n, T) or None
        if lp is not None:
            old[rest.to(old.device)] = lp
    return old


def micro_count(lengths: torch.Tensor, c, device: torch.device) -> int:
    """Micro-batches for a minibatch of rows of these lengths (n,): rl.grad_accum, or on CPU more where the rows
    hold more than rl.micro_batch_tokens tokens (0: no limit), so that one micro-batch's activations are held."""
    if c.micro_batch_tokens <= 0 or device.type != "cpu":
        return c.grad_accum
    return max(c.grad_accum, -(-int(lengths.sum()) // c.micro_batch_tokens))


def rl_update(ctx: Context, r: Rollouts, adv: torch.Tensor, rows: torch.Tensor, ref, opt, a: AlgoConfig,
              extra_grad=None) -> dict:
    """mu epochs x minibatches (one optimizer step each) x micro-batches of the policy loss + the KL term.
    rows (N,): the samples of `r` to train on; adv (N,): their advantages; extra_grad(rows) -> metrics: a term
    that runs its own backward into each optimizer step (the thinking opening loss). Returns the mean metrics."""
    c, model = ctx.cfg.rl, ctx.policy.model
    temp, dev = ctx.cfg.sampling.temperature, ctx.device
    mask = r.batch.mask[rows].to(dev).float()  # (N, T)
    plan = dist.minibatch_plan(len(rows), c.minibatch_size, c.epochs, seed=ctx.step_seed(7))
    seen = [0, 0]  # rows asked for, rows run through the model (rl.dedup: distinct ones only), over every pass
    lowp = ctx.policy.autocast  # every forward below: bf16 autocast under model.compute_dtype, else a no-op
    with lowp():
        old = None if len(plan) == 1 else old_logprobs(model, r, rows, plan[0], temp, c.dedup, seen)  # (N, T)
        ref_lp = frozen_logprobs(ref, r, rows, temp, as_reference=True, dedup=c.dedup,
                                 count=seen) if ref is not None else None  # (N, T)
    sampler_lp = r.batch.logprobs  # (B, T) the engine's log-probs: gap metrics, truncated IS
    sums: dict[str, float] = {}
    count, norms, extra_sums = 0, [], {}
    for step, mb_idx in enumerate(plan):
        opt.zero_grad(set_to_none=True)
        # each micro-batch weighs its share of what agg_loss divides by, over all ranks: exact grad accumulation
        units = dist.global_units(mask[mb_idx], a.agg)
        for m_idx in dist.micro_batches(model, mb_idx, micro_count(r.batch.n_tokens[rows[mb_idx]], c, dev)):
            if m_idx is None:  # FSDP: this rank has fewer micro-batches; match the others' forward/backward
                idle_pass(model)
                continue
            with lowp():
                logp, ent = logprobs_for(model, r, rows[m_idx], temp, with_entropy=True, dedup=c.dedup,
                                         count=seen)  # (n, T)
            m = mask[m_idx]  # (n, T)
            if step == 0:  # the weights are still pi_old's: this forward gives the old log-probs too
                old_lp = logp.detach()
                if old is not None:
                    old[m_idx] = old_lp
            else:
                old_lp = old[m_idx]
            beh = behaviour_logprobs(r.batch, rows[m_idx], sampler_lp[rows[m_idx]].to(dev), old_lp)  # (n, T)
            loss, met = policy_loss(a.loss, logp, old_lp, adv[m_idx].to(dev), m, a, sampler_logp=beh)
            if ref_lp is not None:
                kl_term, kl_met = kl_loss(logp, ref_lp[m_idx], m, a)  # kl_beta * agg(KL); metric: token-mean KL
                loss = loss + kl_term
                met.update(kl_met)
            (loss * (dist.loss_units(m, a.agg) / max(units, 1.0))).backward()
            met["loss"] = loss.item()
            met["entropy"] = ((ent * m).sum() / m.sum().clamp(min=1)).item()
            for k, v in met.items():  # *_max: the max over micro-batches, the rest their mean
                sums[k] = max(sums.get(k, float(v)), float(v)) if k.endswith("_max") else sums.get(k, 0.0) + float(v)
            count += 1
        if extra_grad is not None:
            with lowp():
                for k, v in extra_grad(rows[mb_idx]).items():  # averaged over optimizer steps
                    extra_sums[k] = extra_sums.get(k, 0.0) + v / len(plan)
        dist.sync_grads(model)
        norms.append(grad_norm_clip(model, c.max_grad_norm))  # of the summed gradient: the same on every rank
        opt.step()
    opt.zero_grad(set_to_none=True)  # spent: not held through the next sampling and reference pass
    out = {k: v if k.endswith("_max") else v / max(count, 1) for k, v in sums.items()}
    out |= extra_sums
    out["grad_norm"] = sum(norms) / len(norms)
    out["optimizer_steps"] = float(len(plan))
    out["update/dedup_frac"] = 1.0 - seen[1] / seen[0] if seen[0] else 0.0  # forward rows saved
    return out


def train_rows(r: Rollouts, cfg) -> torch.Tensor:
    """Indices of the samples the loss sees: all, less zero-variance groups (skip/resample), truncated
    samples (mask_truncated) and samples whose verification failed for infrastructure reasons (`infra_error`)."""
    rows = torch.arange(len(r.verdicts))
    if cfg.zero_variance != "keep":
        zv, _ = zero_variance_groups(r.rewards, r.group_ids)
        rows = rows[~zv]
    if cfg.mask_truncated:
        keep = torch.tensor([f != "length" for f in r.batch.finish_reason], dtype=torch.bool)
        rows = rows[keep[rows]]
    return rows[~r.infra[rows]]  # a lost sandbox/worker says nothing about the sample: not in the loss


def advantages(ctx: Context, r: Rollouts, a: AlgoConfig, tracker: DifficultyTracker | None) -> torch.Tensor:
    """(N,) advantages over the batch of all ranks, times the difficulty weights (mean 1 over all ranks) when
    difficulty weighting is on; then the tracker learns this step's pass results of every rank."""
    if tracker is None:
        return dist.batch_advantages(a.advantage, r.rewards, r.group_ids, a)
    ids = [r.task_of(i).task_id for i in range(len(r.verdicts))]
    w = dist.mean_one(tracker.hardness(ids))  # (N,) weighted by the history before this step
    adv = dist.batch_advantages(a.advantage, r.rewards, r.group_ids, a, weights=w)
    tracker.update(dist.all_items(ids), dist.all_items(r.passed.tolist()))
    ctx.state.extra["difficulty"] = tracker.state_dict()  # saved with the next checkpoint
    return adv


def run_rl(ctx: Context) -> None:
    with frozen_table(ctx.policy.model, ctx.cfg.rl.embed_lr_scale == 0):  # rl.embed_lr_scale=0: no table gradient
        _rl_stage(ctx)


def _rl_stage(ctx: Context) -> None:
    c, st = ctx.cfg.rl, ctx.state
    a = stage_algo(ctx.cfg, ctx.stage, ctx.train_tasks)
    if a.kl_beta > 0:
        save_stage_start(ctx)
    ref = reference_model(ctx) if a.kl_beta > 0 else None
    opt, sched = make_optimizer(ctx.policy.model, c.lr, c.warmup, c.steps, cosine=False, cfg=ctx.cfg.optim,
                                 embed_scale=c.embed_lr_scale)
    saved_batches = (ctx.resume or {}).get("async_producer")  # the producer's batches in flight (train/producer.py)
    restore(ctx, opt, sched)
    tracker = None
    if a.difficulty_alpha != 0:
        tracker = DifficultyTracker.from_config(a)
        tracker.load_state_dict(st.extra.get("difficulty", {"rates": {}}))
    think = ThinkingHooks(ctx)  # verifier.thinking: metrics, nothink-bonus constraint, balanced sampling
    engine = think.wrap(make_engine(ctx.policy, ctx.cfg.rollout, ctx.cfg.sampling))
    ctx.on_close.append(engine.close)
    check_async(ctx.cfg)
    probe = GapProbe(ctx)
    producer = AsyncProducer(ctx, c.async_steps, saved_batches, probe, engine) \
        if c.async_steps and st.step < c.steps else None
    if producer is not None:
        ctx.on_close.insert(0, producer.close)  # before the engine and judge it samples with
        ctx.checkpoint_extra["async_producer"] = producer.state_dict
    while st.step < c.steps:
        # 1-3. sample, verify, reward (async_steps > 0: a producer thread did it while the last update ran)
        ctx.policy.model.eval()
        if producer is not None:
            r, extra = producer.next_batch()
            probe_batch = producer.probe_batch  # sampled with this batch's weights, in the producer thread
        else:
            with sampling_weights(engine, ctx.policy.model):
                r, extra = sample_groups(ctx, engine)
                probe_batch = probe.sample(engine, st.step)  # rl.probe_every: fixed prompts, None when not due
        temp = ctx.cfg.sampling.temperature
        prefix_lp = lambda rr, rws: frozen_logprobs(ctx.policy.model, rr, rws, temp)  # noqa: E731
        think_met = think.after_sample(r, prefix_lp)  # before the metrics: the nothink-bonus constraint rescales
        metrics = rollout_metrics(r) | extra | think_met
        metrics |= probe.gap(probe_batch, ctx.policy.model)  # the sampler-trainer log-prob gap, before the update
        # 4. advantages (zero-variance groups: keep with zero advantage, or skip from the loss)
        adv = advantages(ctx, r, a, tracker)  # (N,)
        adv, w_met = think.weigh(r, adv, prefix_lp)
        metrics |= w_met  # balanced sampling: adv * pi(forced prefix) / q(prefix)
        rows = train_rows(r, c)
        if c.placebo:  # the control: the same advantages on other samples (codechat probe)
            adv = placebo_advantages(adv, rows, ctx.step_seed(11))
        metrics["adv_abs_mean"] = adv.abs().mean().item()
        # 5-6. loss and optimizer steps; the schedule counts RL steps
        t0 = time.perf_counter()
        ctx.policy.model.train()
        metrics["lr"] = opt.param_groups[0]["lr"]
        if dist.any_true(len(rows) > 0):
            opening = {"extra_grad": lambda rws: think.opening_grad(ctx.policy.model, r, rws, temp)} \
                if think.opening_coef > 0 else {}  # verifier.thinking.opening_loss: its gradient in every step
            metrics.update(rl_update(ctx, r, adv[rows], rows, ref, opt, a, **opening))
        else:
            metrics["skipped_update"] = 1.0
        schedule_step(sched)  # also after a step without an update
        if producer is None:  # (the producer loads each batch's snapshot into an engine with its own weights)
            push_weights(engine, ctx.policy.model)  # vLLM: the new weights in memory, no disk round trip
        metrics["time/update_s"] = time.perf_counter() - t0
        save_rollouts(ctx, r)
        if ctx.cfg.log.audit:
            append_audit(ctx.run_dir, audit_rollouts(r, st.global_step + 1, ctx.cfg.log.audit_top_k))
        # 7-8. log, evaluate, checkpoint
        end_step(ctx, metrics, c.steps, opt, sched, samples=extra["samples"])
    if producer is not None:
        producer.close()  # the next stage starts without this stage's model copy
        ctx.checkpoint_extra.pop("async_producer", None)


def save_rollouts(ctx: Context, r: Rollouts) -> None:
    """Append this step's samples to rollouts.jsonl (offline DPO and audits read it), numbered with the
    metrics.jsonl step of the update that uses them (the step about to finish)."""
    lines = rollout_records(r, ctx.state.global_step + 1, ctx.policy.eos_token_ids)
    every = dist.gather(lines)  # every rank's samples, in rank order; rank 0 writes them
    if dist.is_main():
        with open(ctx.run_dir / "rollouts.jsonl", "a", encoding="utf-8") as f:
            f.writelines(line for rank_lines in every for line in rank_lines)
