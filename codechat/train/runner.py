"""`codechat train`: run the configured stages (sft, rft, grpo, rloo, dpo) in order, with checkpoints and resume.

    codechat train --config configs/grpo.yaml rl.lr=3e-5 run_dir=runs/x
    codechat train --resume runs/x            # continues exactly from the last complete checkpoint
"""
from __future__ import annotations

import dataclasses
import json
import random
import warnings
from pathlib import Path

import numpy as np
import torch

from codechat import CodechatError
from codechat import configio  # as a module: configio imports the stage registry, which imports this package
from codechat.config import RunConfig
from codechat.jsonl import read_jsonl
from codechat.policy import load_policy
from codechat.policy.fsdp import shard
from codechat.tasks import load_tasks
from codechat.tasks.repo_loaders import is_repo_spec, load_repo_tasks
from codechat.tasks.quarantine import exclude, read_quarantine
from codechat.tasks.splits import warn_overlap
from codechat.train import dist
from codechat.train.checkpoint import Checkpointer, TrainState
from codechat.train.common import Context
from codechat.train.metrics import MetricsLogger, plot_run
from codechat.train.stages import STAGES, batch_sizes, stage_steps
from codechat.verifier.factory import make_verifier


def _truncate_jsonl(path: Path, keep) -> None:
    """Drop records written after the checkpoint we resume from (they will be written again)."""
    if path.is_file():
        kept = [rec for _, rec in read_jsonl(path) if keep(rec)]
        path.write_text("".join(json.dumps(rec) + "\n" for rec in kept), encoding="utf-8")


def _set_name(spec: str) -> str:
    """Metric prefix of an extra eval set: builtin:basic -> basic, data/mbpp.jsonl.gz -> mbpp."""
    name = spec.split(":", 1)[1] if spec.startswith("builtin:") else Path(spec).name.split(".")[0]
    return name.replace("-", "_") or "extra"


def _load_task_sets(cfg: RunConfig):
    fmt = cfg.data.format or None
    for spec in [cfg.data.eval, *cfg.data.extra_eval]:
        if is_repo_spec(spec):
            raise CodechatError(f"data.eval: {spec}: repository tasks are evaluated with `codechat eval --tasks "
                                f"{spec}`, not inside training")
    train_tasks = load_repo_tasks(cfg.data.train) if is_repo_spec(cfg.data.train) else load_tasks(cfg.data.train, fmt)
    evals = load_tasks(cfg.data.eval, fmt) if cfg.data.eval else []
    extra = {_set_name(p): load_tasks(p) for p in cfg.data.extra_eval}
    if cfg.data.exclude:  # quarantined tasks (codechat tasks check --write-quarantine)
        ids = read_quarantine(cfg.data.exclude)
        train_tasks, evals = exclude(train_tasks, ids), exclude(evals, ids)
        extra = {k: exclude(v, ids) for k, v in extra.items()}
        if not train_tasks:
            raise CodechatError(f"data.exclude: {cfg.data.exclude} leaves no training task in {cfg.data.train}")
    if cfg.data.max_eval_tasks:
        evals = evals[:cfg.data.max_eval_tasks]
        extra = {k: v[:cfg.data.max_eval_tasks] for k, v in extra.items()}
    if not is_repo_spec(cfg.data.train):  # repository tasks have no prompt text to compare
        warn_overlap(train_tasks, {**({cfg.data.eval: evals} if evals else {}), **extra},
                     cfg.data.train)
    return train_tasks, evals, extra


def train(cfg: RunConfig | None = None, resume: str | Path | None = None, overrides: list[str] | None = None) -> Path:
    """Run (or resume) a training run; returns the run directory."""
    state, trainer_state, model_path, resumed = TrainState(), None, None, False
    if resume:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise CodechatError(f"{run_dir}: not a run directory (no config.yaml) — cannot resume")
        cfg = configio.load_config(run_dir / "config.yaml", overrides)
        cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
        ckpt = Checkpointer(run_dir).latest()
        if ckpt is not None:
            state, trainer_state = Checkpointer.load_state(ckpt)
            model_path, resumed = str(ckpt / "model"), True
    else:
        cfg = cfg or configio.load_config(None, overrides)
        run_dir = Path(cfg.run_dir)
        if Checkpointer(run_dir).latest() is not None:
            raise CodechatError(f"{run_dir}: already holds checkpoints; use --resume {run_dir} or another run_dir")
    own_group = dist.init(cfg.dist)  # under torchrun: join the ranks; rank 0 alone writes files
    dist.check_batches(batch_sizes(cfg))
    main = dist.is_main()
    if main:
        if resumed:
            _truncate_jsonl(run_dir / "metrics.jsonl", lambda r: r.get("step", 0) <= state.global_step)
            for name in ("rollouts.jsonl", "audit.jsonl"):
                _truncate_jsonl(run_dir / name, lambda r: r.get("step", 0) < state.global_step)
        run_dir.mkdir(parents=True, exist_ok=True)
        configio.save_config(cfg, run_dir / "config.yaml")

    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model_cfg = cfg.model if model_path is None else dataclasses.replace(cfg.model, path=model_path)
    policy = load_policy(model_cfg)
    dist.broadcast_params(policy.model)
    if cfg.dist.parallel == "fsdp":
        if dist.world() > 1:
            shard(policy.model)
        else:
            warnings.warn("dist.parallel=fsdp in one process: nothing to shard over, the model stays whole "
                          "(start with torchrun --nproc_per_node N to shard)")
    train_tasks, eval_tasks, extra = _load_task_sets(cfg)
    total = sum(stage_steps(cfg, s) for s in cfg.stages)
    logger = MetricsLogger(run_dir, cfg.log, total_steps=total, run_config=dataclasses.asdict(cfg)) if main \
        else dist.NullLogger()
    ckpt = Checkpointer(run_dir, cfg.checkpoint.keep_last)
    with make_verifier(dist.per_rank_verifier(cfg.verifier)) as verifier:
        ctx = Context(cfg, policy, verifier, logger, ckpt, state, run_dir, train_tasks, eval_tasks, extra,
                      resume=trainer_state)
        try:
            while state.stage_idx < len(cfg.stages):
                if state.step < stage_steps(cfg, ctx.stage):
                    STAGES[ctx.stage].run(ctx)
                    latest = ckpt.latest() if main else None
                    if dist.decide(latest is None or latest.name != f"step-{state.global_step:07d}"):
                        ckpt.save(policy, state)  # every rank: a collective under FSDP; rank 0 writes
                ctx.resume = None
                state.stage_idx += 1
                state.step, state.data_pos, state.extra = 0, 0, {}
        finally:
            logger.close()
    dist.barrier()  # rank 0's last checkpoint is complete before any rank returns
    for close in ctx.on_close:  # after the barrier: vLLM's shutdown takes the default process group with it
        close()
    if own_group:
        dist.close()
    if cfg.log.plot and main:
        plot_run(run_dir)
    return run_dir
