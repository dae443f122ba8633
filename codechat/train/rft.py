"""Rejection-sampling fine-tuning (expert iteration): per round, sample G completions per prompt, keep the
passing ones (deduplicated per task), fine-tune on them. `rft.rest_em`: ReST-EM — every improve step restarts
from the stage's base weights and trains on the samples of the latest grow step.

The stage's step counter counts improve steps over all rounds (rounds x rft.steps). Each round's kept samples
are saved before its improve step, so a resume into the middle of a round trains on the same data.
"""
from __future__ import annotations

import json

from codechat.rollout.collect import collect, rollout_metrics
from codechat.train import dist
from codechat.train.common import Context, save_stage_start, take
from codechat.train.sft import dedupe, train_on_pairs


def grow(ctx: Context, rnd: int) -> tuple[list[tuple[list[int], list[int]]], dict]:
    """Sample and keep passing (prompt ids, completion ids), one copy of each distinct completion per task."""
    from codechat.policy import Sampler

    c = ctx.cfg.rft
    tasks = dist.shard(take(ctx.train_tasks, ctx.cfg.seed + ctx.state.stage_idx, rnd * c.prompts, c.prompts))
    from codechat.policy.fsdp import full_weights

    ctx.policy.model.eval()
    with full_weights(ctx.policy.model):  # FSDP: sample from gathered weights
        r = collect(ctx.policy, Sampler(ctx.policy), ctx.verifier, tasks, c.group_size, ctx.cfg.sampling,
                    seed=ctx.cfg.seed * 977 + rnd)
    kept = []
    for i, v in enumerate(r.verdicts):
        if v.passed:
            n = int(r.batch.mask[i].sum())
            kept.append((r.task_of(i).task_id, r.prompts[int(r.group_ids[i])], r.batch.tokens[i, :n].tolist()))
    kept = dedupe([k for part in dist.gather(kept) for k in part], key=lambda k: (k[0], tuple(k[2])))  # all ranks'
    m = dist.mean_metrics(rollout_metrics(r))
    m.update({"rft/kept": len(kept), "rft/tasks_with_pass": len({k[0] for k in kept}), "rft/round": rnd,
              "samples_drawn": int(dist.all_sum(len(r.verdicts)))})
    return [(k[1], k[2]) for k in kept], m


def run_rft(ctx: Context) -> None:
    c = ctx.cfg.rft
    if c.rest_em:
        save_stage_start(ctx)
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
            ctx.state.step = (rnd + 1) * c.steps
            continue
        if c.rest_em and rnd > 0 and ctx.state.step == rnd * c.steps:
            from codechat.config import ModelConfig
            from codechat.policy import load_policy
            base = load_policy(ModelConfig(path=str(ctx.stage_start_dir()), device=str(ctx.device),
                                           dtype=ctx.cfg.model.dtype))
            from codechat.policy.fsdp import load_full_state_dict
            load_full_state_dict(ctx.policy.model, base.model.state_dict())
        train_on_pairs(ctx, None, c.steps, c.lr, c.batch_size, 0, encoded=encoded, start=rnd * c.steps)
