"""Rejection-sampling fine-tuning (expert iteration): per round, sample G completions per prompt, keep the
passing ones (deduplicated per task), fine-tune on them. `rft.rest_em`: ReST-EM — every improve step restarts
from the stage's starting weights (with LoRA: its starting adapters, the base being frozen) and trains on the
samples of the latest grow step.

The stage's step counter counts improve steps over all rounds (rounds x rft.steps). Each round's kept samples
are saved before its improve step, so a resume into the middle of a round trains on the same data.

Repository tasks: a sample is a whole episode (train/episodes.py), kept when the hidden tests pass; the improve
step's loss is on its model tokens only (tool results and the prompt masked), as SFT on expert transcripts.

    codechat train --config configs/rft.yaml
"""
from __future__ import annotations

import json

import torch

from codechat.config import ModelConfig
from codechat.policy import Sampler, load_policy
from codechat.policy.fsdp import full_weights, load_full_state_dict
from codechat.policy.lora import is_lora
from codechat.rollout.collect import rollout_metrics
from codechat.train import dist
from codechat.train.common import Context, save_stage_start, take
from codechat.train.episodes import episode_metrics
from codechat.train.rollouts import collect_rollouts
from codechat.train.sft import dedupe, train_on_pairs
from codechat.train.watch import warn_empty_round

ADAPTERS = "adapters.pt"
"""ReST-EM with LoRA: the stage's starting adapter weights, in the stage-start directory."""


def save_restart_point(ctx: Context) -> None:
    """ReST-EM's restart point, once at the stage start: the whole weights, or with LoRA the trainable adapters
    (the base is frozen, and a merged state dict does not load into the PEFT model)."""
    if not is_lora(ctx.policy.model):
        save_stage_start(ctx)
        return
    f = ctx.stage_start_dir() / ADAPTERS
    if ctx.state.step == 0 and not f.is_file() and dist.is_main():
        f.parent.mkdir(parents=True, exist_ok=True)
        sd = {n: p.detach().cpu().clone() for n, p in ctx.policy.model.named_parameters() if p.requires_grad}
        torch.save(sd, f.with_suffix(".tmp"))
        f.with_suffix(".tmp").replace(f)
    dist.barrier()


def restart(ctx: Context) -> None:
    """Back to the stage's starting weights (ReST-EM, at the start of every round after the first)."""
    model = ctx.policy.model
    if is_lora(model):
        sd = torch.load(ctx.stage_start_dir() / ADAPTERS, map_location=ctx.device)
        missing = set(sd) - {n for n, _ in model.named_parameters()}
        if missing:
            raise RuntimeError(f"ReST-EM restart: adapters {sorted(missing)[:3]} not in the model")
        model.load_state_dict(sd, strict=False)
        return
    base = load_policy(ModelConfig(path=str(ctx.stage_start_dir()), device=str(ctx.device), dtype=ctx.cfg.model.dtype))
    load_full_state_dict(model, base.model.state_dict())


def grow(ctx: Context, rnd: int) -> tuple[list[tuple], dict]:
    """Sample and keep passing (prompt ids, completion ids), one copy of each distinct completion per task;
    repository tasks: (prompt ids, the rest of the episode, its model-token mask) per distinct passing episode."""
    c = ctx.cfg.rft
    tasks = dist.shard(take(ctx.train_tasks, ctx.cfg.seed + ctx.state.stage_idx, rnd * c.prompts, c.prompts))
    ctx.policy.model.eval()
    seed = ctx.cfg.seed * 977 + rnd
    with full_weights(ctx.policy.model):  # FSDP: sample from gathered weights
        r = collect_rollouts(ctx, Sampler(ctx.policy), tasks, c.group_size, seed=seed)
    kept = []
    for i, v in enumerate(r.verdicts):
        if not v.passed:
            continue
        ids, mask = r.trained_tokens(i)
        kept.append((r.task_of(i).task_id, r.prompts[int(r.group_ids[i])], ids) + ((mask,) if mask is not None else ()))
    kept = dedupe([k for part in dist.gather(kept) for k in part], key=lambda k: (k[0], tuple(k[2])))  # all ranks'
    m = dist.mean_metrics(rollout_metrics(r) | (episode_metrics(r) if r.episodes else {}))
    m.update({"rft/kept": len(kept), "rft/tasks_with_pass": len({k[0] for k in kept}), "rft/round": rnd,
              "samples_drawn": int(dist.all_sum(len(r.verdicts)))})
    return [tuple(k[1:]) for k in kept], m


def run_rft(ctx: Context) -> None:
    c = ctx.cfg.rft
    if c.rest_em:
        save_restart_point(ctx)
    while ctx.state.step < c.rounds * c.steps:
        rnd = ctx.state.step // c.steps
        data_file = ctx.run_dir / "stages" / f"{ctx.state.stage_idx}-rft-round{rnd}.json"
        if data_file.is_file():
            encoded = [tuple(x) for x in json.loads(data_file.read_text())["data"]]
        else:
            encoded, m = grow(ctx, rnd)
            ctx.state.samples += m.pop("samples_drawn")
            if dist.is_main():  # the others have checked for the file before rank 0 can get here (grow gathers)
                data_file.parent.mkdir(parents=True, exist_ok=True)
                tmp = data_file.with_suffix(".tmp")
                tmp.write_text(json.dumps({"data": encoded, "metrics": m}))
                tmp.replace(data_file)
            ctx.logger.log(m | {"stage": "rft", "samples": ctx.state.samples}, ctx.state.global_step)
        if not encoded:  # nothing passed: skip this round's improve step
            if dist.is_main():
                warn_empty_round(rnd, c.prompts * c.group_size)
            ctx.state.step = (rnd + 1) * c.steps
            continue
        if c.rest_em and rnd > 0 and ctx.state.step == rnd * c.steps:
            restart(ctx)
        train_on_pairs(ctx, None, c.steps, c.lr, c.batch_size, 0, encoded=encoded, start=rnd * c.steps)
