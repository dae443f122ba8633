"""`codechat train`: run the configured stages (sft, rft, grpo, rloo, dpo) in order, with checkpoints and resume.

    codechat train --config configs/grpo.yaml rl.lr=3e-5 run_dir=runs/x
    codechat train --resume runs/x            # continues exactly from the last complete checkpoint
"""
from __future__ import annotations

import dataclasses
import random
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from codechat import CodechatError
from codechat.config import io as configio
from codechat.config import RunConfig
from codechat.plugins import load_with, record as record_plugins
from codechat.policy import load_policy
from codechat.policy.fsdp import shard
from codechat.policy.hf import pick_device
from codechat.policy.lora import is_adapter_dir
from codechat.policy.precision import check_autocast
from codechat.tasks.repo_loaders import is_repo_spec
from codechat.tasks.quarantine import exclude, read_quarantine
from codechat.tasks.statement import not_unique
from codechat.tasks.splits import warn_overlap
from codechat.train import dist
from codechat.train.checkpoint import Checkpointer, TrainState
from codechat.train.common import Context
from codechat.train.context import drop_long, prompt_limit
from codechat.train.metrics import MetricsLogger, plot_run, start_wandb
from codechat.train.rundir_logs import check_run_dir, clear_run_dir, truncate_logs
from codechat.train.runlock import RunLock
from codechat.train.stages import STAGES, batch_sizes, stage_steps
from codechat.verifier.dedup import DedupVerifier
from codechat.train.watch import resume_point, sigterm_as_interrupt
from codechat.verifier.factory import make_verifier, training_verifier_config


def _set_name(spec: str) -> str:
    """Metric prefix of an extra eval set: builtin:basic -> basic, data/mbpp.jsonl.gz -> mbpp."""
    name = spec.split(":", 1)[1] if spec.startswith("builtin:") else Path(spec).name.split(".")[0]
    return name.replace("-", "_") or "extra"


def load_task_sets(cfg: RunConfig):
    fmt, loader = cfg.data.format or None, cfg.data.loader
    for spec in [cfg.data.eval, *cfg.data.extra_eval]:
        if is_repo_spec(spec):
            raise CodechatError(f"data.eval: {spec}: repository tasks are evaluated with `codechat eval --tasks "
                                f"{spec}`, not inside training")
    train_tasks = load_with(loader, cfg.data.train, fmt)
    evals = load_with(loader, cfg.data.eval, fmt) if cfg.data.eval else []
    extra = {_set_name(p): load_with(loader, p) for p in cfg.data.extra_eval}
    if cfg.data.exclude:  # quarantined tasks (codechat tasks check --write-quarantine)
        ids = read_quarantine(cfg.data.exclude)
        train_tasks, evals = exclude(train_tasks, ids), exclude(evals, ids)
        extra = {k: exclude(v, ids) for k, v in extra.items()}
        if not train_tasks:
            raise CodechatError(f"data.exclude: {cfg.data.exclude} leaves no training task in {cfg.data.train}")
    if cfg.data.multiple_answers not in ("exclude", "keep"):
        raise CodechatError(f"data.multiple_answers: '{cfg.data.multiple_answers}' is not one of exclude, keep")
    if cfg.data.multiple_answers == "exclude":
        judged = lambda ts: [t for t in ts if not not_unique(t)]  # noqa: E731
        train_tasks, evals, extra = judged(train_tasks), judged(evals), {k: judged(v) for k, v in extra.items()}
        if not train_tasks:
            raise CodechatError(f"data.train: every task of {cfg.data.train} accepts several answers and has no "
                                f"checker (data.multiple_answers=keep trains on them anyway)")
    if cfg.data.max_eval_tasks:
        evals = evals[:cfg.data.max_eval_tasks]
        extra = {k: v[:cfg.data.max_eval_tasks] for k, v in extra.items()}
    if not is_repo_spec(cfg.data.train):  # repository tasks have no prompt text to compare
        warn_overlap(train_tasks, {**({cfg.data.eval: evals} if evals else {}), **extra},
                     cfg.data.train)
    return train_tasks, evals, extra


def train(cfg: RunConfig | None = None, resume: str | Path | None = None, overrides: list[str] | None = None,
          force: bool = False) -> Path:
    """Run (or resume) a training run; returns the run directory. A fresh run into a directory that holds one
    is refused unless `force` (which removes the earlier run's files once the new run's inputs have loaded); a
    directory that a live run holds is refused always (train/runlock.py)."""
    state, trainer_state, model_path = TrainState(), None, None
    if resume:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise CodechatError(f"{run_dir}: not a run directory (no config.yaml) — cannot resume")
        cfg = configio.load_config(run_dir / "config.yaml", overrides)
        cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
        ckpt = Checkpointer(run_dir).latest()
        if ckpt is not None:
            state, trainer_state = Checkpointer.load_state(ckpt)
            model_path = str(ckpt / "model")
    else:
        cfg = cfg or configio.load_config(None, overrides)
        run_dir = Path(cfg.run_dir)
    own_group = dist.init(cfg.dist)  # under torchrun: join the ranks; rank 0 alone writes files
    dist.check_batches(batch_sizes(cfg))
    check_autocast(cfg.model.compute_dtype, pick_device(cfg.model.device))  # before the run directory is claimed
    lock, found = _claim(run_dir, resume is not None, force)
    try:
        return _run(cfg, run_dir, state, trainer_state, model_path, resume is not None, found, own_group)
    finally:
        if lock is not None:
            lock.release()


def _claim(run_dir: Path, resume: bool, force: bool) -> tuple[RunLock | None, list[str]]:
    """Rank 0 locks run_dir (one live run per directory) and, for a fresh run, checks what it would replace;
    every rank raises when that fails. Nothing of the run is written yet."""
    lock, found, err = None, [], ""
    if dist.is_main():
        try:
            lock = RunLock.acquire(run_dir)
            found = [] if resume else check_run_dir(run_dir, force)
        except CodechatError as e:
            if lock is not None:
                lock.release()
            lock, err = None, str(e)
    if dist.decide(bool(err)):
        raise CodechatError(err or f"{run_dir}: rank 0 could not claim the run directory (its error says why)")
    return lock, found


def _run(cfg: RunConfig, run_dir: Path, state: TrainState, trainer_state: dict | None, model_path: str | None,
         resume: bool, found: list[str], own_group: bool) -> Path:
    """The run, once run_dir is locked: load and check every input, then write the run's files and train."""
    main = dist.is_main()
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if model_path is not None and is_adapter_dir(Path(model_path)):  # LoRA: the configured base + the adapters
        policy = load_policy(cfg.model, adapters=model_path)
    else:
        policy = load_policy(cfg.model if model_path is None else dataclasses.replace(cfg.model, path=model_path))
    dist.broadcast_params(policy.model)
    if cfg.dist.parallel == "fsdp":
        if dist.world() > 1:
            shard(policy.model)
        else:
            warnings.warn("dist.parallel=fsdp in one process: nothing to shard over, the model stays whole "
                          "(start with torchrun --nproc_per_node N to shard)")
    train_tasks, eval_tasks, extra = load_task_sets(cfg)
    limit = prompt_limit(cfg, policy)  # over-long prompts dropped, with a count (train/context.py)
    train_tasks, eval_tasks = drop_long(train_tasks, policy, limit, "train"), drop_long(eval_tasks, policy, limit, "eval")
    extra = {k: drop_long(v, policy, limit, k) for k, v in extra.items()}
    wandb_run = start_wandb(cfg.log, run_dir, dataclasses.asdict(cfg), resume) if main else None
    if main:  # the inputs are good: only now is anything of the run written (a failed start leaves no run behind)
        if resume:  # also a run killed before its first checkpoint: it restarts at step 0 with empty logs
            truncate_logs(run_dir, state.global_step)
        else:
            clear_run_dir(run_dir, found)
        record_plugins([*cfg.rewards.components, cfg.data.loader], run_dir)  # RUN/plugins/: what --resume loads
        configio.save_config(cfg, run_dir / "config.yaml")
    total = sum(stage_steps(cfg, s) for s in cfg.stages)
    logger = MetricsLogger(run_dir, cfg.log, total_steps=total, run_config=dataclasses.asdict(cfg),
                           stages=[(s, stage_steps(cfg, s)) for s in cfg.stages], wandb_run=wandb_run) if main \
        else dist.NullLogger()
    ckpt = Checkpointer(run_dir, cfg.checkpoint.keep_last)
    vcfg = training_verifier_config(cfg.verifier, cfg.rewards.components)  # (stdio: stop at the first failure)
    with make_verifier(dist.per_rank_verifier(vcfg)) as verifier:
        verifier = DedupVerifier(verifier, cfg.verifier.cache_size, cfg.verifier.dedup)  # once per distinct program
        ctx = Context(cfg, policy, verifier, logger, ckpt, state, run_dir, train_tasks, eval_tasks, extra,
                      resume=trainer_state)
        try:
            with sigterm_as_interrupt():  # SIGTERM stops like Ctrl-C: the step in progress is dropped
                while state.stage_idx < len(cfg.stages):
                    if state.step < stage_steps(cfg, ctx.stage):
                        STAGES[ctx.stage].run(ctx)
                        latest = ckpt.latest() if main else None
                        if dist.decide(latest is None or latest.name != f"step-{state.global_step:07d}"):
                            ckpt.save(policy, state)  # every rank: a collective under FSDP; rank 0 writes
                    ctx.resume = None
                    state.stage_idx += 1
                    state.step, state.data_pos, state.extra = 0, 0, {}
        except KeyboardInterrupt:
            if main:
                print(f"\ntraining stopped after step {state.global_step} (the step in progress is dropped); "
                      f"{resume_point(run_dir, ckpt.latest())}", file=sys.stderr, flush=True)
            raise
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
