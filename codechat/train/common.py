"""What every stage shares: the run context, optimizer and schedule, seeded data order, padding, step end
(log, evaluate, checkpoint), and the frozen reference model."""
from __future__ import annotations

import contextlib
import copy
import math
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from codechat.config import ModelConfig, OptimConfig, RunConfig
from codechat.evaluation.evaluate import evaluate_policy
from codechat.policy import load_policy
from codechat.policy.fsdp import full_state_dict, full_weights, grad_norm, is_sharded, load_optimizer_state, shard
from codechat.policy.lora import is_lora
from codechat.policy.sampler import pad_rows
from codechat.tasks import Task
from codechat.train import dist
from codechat.train.checkpoint import Checkpointer, TrainState, set_rng_state, write_dir
from codechat.train.watch import NoSignalWatch


@dataclass
class Context:
    cfg: RunConfig
    policy: Any
    verifier: Any
    logger: Any
    ckpt: Checkpointer
    state: TrainState
    run_dir: Path
    train_tasks: list[Task]
    eval_tasks: list[Task] = field(default_factory=list)
    extra_eval: dict[str, list[Task]] = field(default_factory=dict)
    resume: dict | None = None
    """trainer.pt of the checkpoint being resumed, consumed by the first stage that starts."""
    eval_history: list[dict] = field(default_factory=list)
    on_close: list = field(default_factory=list)
    """Called once at the end of the run, after the last barrier (a vLLM engine's shutdown)."""
    watch: NoSignalWatch = field(default_factory=NoSignalWatch)
    """Warns when RL steps keep having no learning signal (train/watch.py)."""
    judge: Any = None
    """The RepoJudge of repository-task episodes, made on first use (train/episodes.py), closed with the run."""
    checkpoint_extra: dict = field(default_factory=dict)
    """Name -> function returning a picklable value saved in trainer.pt with each checkpoint of the stage (the
    asynchronous producer's batches in flight); a resumed stage finds it in `resume[name]`."""

    @property
    def stage(self) -> str:
        return self.cfg.stages[self.state.stage_idx]

    @property
    def device(self) -> torch.device:
        return self.policy.device

    def step_seed(self, salt: int = 0) -> int:
        """A seed that depends only on (run seed, stage, step): resuming replays the same randomness."""
        return (self.cfg.seed * 1_000_003 + self.state.stage_idx * 10_007 + self.state.step) * 31 + salt

    def stage_start_dir(self) -> Path:
        return self.run_dir / "stages" / f"{self.state.stage_idx}-{self.stage}-start"


@contextlib.contextmanager
def frozen_table(model: torch.nn.Module, freeze: bool):
    """With `freeze`, the input embedding (and an LM head tied to it) takes no gradient inside the block: the
    backward skips the (vocab x hidden) weight gradient and AdamW its update, where an lr-0 group would compute
    and discard both (Qwen's 151,936-row table is 29M of the Qwen-shaped demo's 31M parameters). Not under FSDP,
    whose root shard holds the table with the final norm; there the lr-0 group stands."""
    table = [p for p in model.get_input_embeddings().parameters() if p.requires_grad] \
        if freeze and not is_sharded(model) else []
    for p in table:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in table:
            p.requires_grad_(True)


def make_optimizer(model: torch.nn.Module, lr: float, warmup: int, total: int, cosine: bool, cfg: OptimConfig,
                   embed_scale: float = 1.0):
    """AdamW over the trainable parameters (cfg: betas, weight decay) and a LambdaLR: linear warmup over `warmup`
    scheduler steps, then constant, or with `cosine` a cosine decay to 10% at `total`. embed_scale != 1: the input
    embedding (and an LM head tied to it) is a second parameter group at lr x embed_scale (group 0 stays the
    body's). The fused kernel where torch has one (CPU, CUDA): the same update in one pass per tensor, where the
    for-loop AdamW allocates two temporaries the size of each parameter every step (2 x 39 MB for Qwen's
    151,936 x 64 table); the HF Trainer's default."""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    groups: list = params
    if embed_scale != 1.0:
        table = {id(p) for p in model.get_input_embeddings().parameters()}
        body, embed = [p for p in params if id(p) not in table], [p for p in params if id(p) in table]
        groups = [{"params": body}] + ([{"params": embed, "lr": lr * embed_scale}] if embed else [])
    opt = torch.optim.AdamW(groups, lr=lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                            fused=fused or None)

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if not cosine or total <= warmup:
            return 1.0
        t = (step - warmup) / max(total - warmup, 1)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def schedule_step(scheduler) -> None:
    """Advance the schedule one step, with or without an optimizer step before it: a step whose every group had
    zero variance updates nothing but still counts (the warmup counts steps), which torch would warn about."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`")
        scheduler.step()


def restore(ctx: Context, optimizer, scheduler) -> None:
    """Load optimizer, scheduler and RNG state when resuming into the middle of this stage."""
    if ctx.resume is None:
        return
    if ctx.resume.get("optimizer") and optimizer is not None:
        load_optimizer_state(ctx.policy.model, optimizer, ctx.resume["optimizer"])
    if ctx.resume.get("scheduler") and scheduler is not None:
        scheduler.load_state_dict(ctx.resume["scheduler"])
    set_rng_state(ctx.resume["rng"])
    ctx.resume = None


def take(tasks: list[Task], seed: int, pos: int, count: int) -> list[Task]:
    """Tasks at positions pos..pos+count of an endless sequence of seeded shuffles (one per epoch)."""
    out, n = [], len(tasks)
    for p in range(pos, pos + count):
        epoch, i = divmod(p, n)
        order = list(range(n))
        random.Random(seed * 7919 + epoch).shuffle(order)
        out.append(tasks[order[i]])
    return out


def pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists -> tokens (B, T) long, mask (B, T) float (1 on every real token)."""
    tokens, mask, _ = pad_rows(seqs, pad_id)
    return tokens, mask


def grad_norm_clip(model: torch.nn.Module, max_norm: float) -> float:
    """Gradient norm before clipping (over all shards under FSDP); clipped to max_norm when it is > 0."""
    return grad_norm(model, max_norm)


def reference_model(ctx: Context):
    """Frozen copy of the stage's starting weights (saved at the stage start so a resume finds them). With LoRA
    the reference is the policy itself with adapters disabled (use it inside `codechat.policy.reference(model)`),
    so no second copy of the weights is held."""
    if is_lora(ctx.policy.model):
        return ctx.policy.model
    d = ctx.stage_start_dir()
    sharded = is_sharded(ctx.policy.model)  # FSDP: the copy is loaded from the stage-start save, then sharded
    if sharded or (d.is_dir() and ctx.state.step > 0):
        ref = load_policy(ModelConfig(path=str(d), device=str(ctx.device), dtype=ctx.cfg.model.dtype)).model
    else:
        ref = copy.deepcopy(ctx.policy.model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return shard(ref) if sharded else ref


def save_stage_start(ctx: Context) -> None:
    """Save the stage's starting weights once (rank 0, at step 0) to stage_start_dir: the reference of KL and DPO,
    and ReST-EM's restart point. With LoRA the reference needs no copy (adapters off); ReST-EM saves the
    starting adapters (rft.py)."""
    d = ctx.stage_start_dir()
    if is_lora(ctx.policy.model):
        return
    if not is_sharded(ctx.policy.model):
        if ctx.state.step == 0 and not d.is_dir() and dist.is_main():
            write_dir(d, ctx.policy.save, ctx.run_dir)
        return
    # FSDP: every rank gathers (a collective), rank 0 writes, and the others wait: they load it as the reference
    if dist.decide(ctx.state.step == 0 and not d.is_dir()):
        weights = full_state_dict(ctx.policy.model)
        if dist.is_main():
            write_dir(d, lambda tmp: ctx.policy.save(tmp, state_dict=weights), ctx.run_dir)
    dist.barrier()


def evaluate_now(ctx: Context) -> dict[str, float]:
    """Held-out greedy pass@1 and sampled pass@k, plus each extra set (capability regression)."""
    e, out = ctx.cfg.eval, {}
    sets = ([("eval", ctx.eval_tasks)] if ctx.eval_tasks else []) + [(f"eval_{k}", v) for k, v in ctx.extra_eval.items()]
    for name, tasks in sets:
        with full_weights(ctx.policy.model):  # FSDP: sample from gathered weights (every rank evaluates)
            rep = evaluate_policy(ctx.policy, ctx.verifier, tasks, n=e.n, ks=e.k, temperature=e.temperature,
                                  greedy=e.greedy, sampling=ctx.cfg.sampling, seed=ctx.cfg.seed + 99,
                                  thinking=ctx.cfg.verifier.thinking.enabled,  # by mode, by difficulty bucket:
                                  reference=ctx.state.extra.get("thinking_ref_rates") if name == "eval" else None)
        for k, v in rep.metrics.items():  # (thinking_ref_rates: train/thinking.py, at the RL stage start)
            if k.startswith(("pass@", "thinking/", "difficulty/")) or k == "greedy_pass@1":
                out[f"{name}/{k}"] = v
    base = ctx.state.extra.setdefault("stage_start_eval", {})
    for k, v in list(out.items()):  # (adds the /regressed flags)
        if k.startswith("eval_"):
            start = base.setdefault(k, v)
            if start - v > e.regression_margin:
                warnings.warn(f"capability regression: {k} fell from {start:.3f} to {v:.3f} in stage {ctx.stage}")
                out[f"{k}/regressed"] = 1.0
    if out:
        ctx.eval_history.append({"step": ctx.state.global_step, "stage": ctx.stage, **out})
    return out


def end_step(ctx: Context, metrics: dict, total_steps: int, optimizer=None, scheduler=None,
             samples: int = 0) -> None:
    """After an optimizer step: count it, evaluate and checkpoint when due, log."""
    st, cfg = ctx.state, ctx.cfg
    st.step += 1
    st.global_step += 1
    st.samples += int(dist.all_sum(samples))  # over all ranks
    last = st.step >= total_steps
    if ctx.eval_tasks or ctx.extra_eval:
        e = cfg.eval
        if (e.every and st.step % e.every == 0 and (not e.every_stages or ctx.stage in e.every_stages)) or last:
            ev = evaluate_now(ctx)
            metrics.update(ev)
            p1 = ev.get("eval/greedy_pass@1", ev.get("eval/pass@1"))
            if p1 is not None and p1 > st.best_metric:
                st.best_metric = p1
                st.best_checkpoint = f"step-{st.global_step:07d}"
                save = True
            else:
                save = False
        else:
            save = False
    else:
        save = False
    metrics.update({"stage": ctx.stage, "samples": st.samples})
    if optimizer is not None:  # the lr of the step just taken, unless the stage logged it before its schedule step
        metrics.setdefault("lr", optimizer.param_groups[0]["lr"])
    logged = dist.mean_metrics(metrics)
    ctx.logger.log(logged, st.global_step)
    if dist.is_main():
        ctx.watch.after_step(ctx.stage, logged)
    if dist.decide(save or last or bool(cfg.checkpoint.every and st.step % cfg.checkpoint.every == 0)):
        extra = {k: f() for k, f in ctx.checkpoint_extra.items()}
        ctx.ckpt.save(ctx.policy, st, optimizer, scheduler, extra=extra)  # every rank: a collective under FSDP; rank 0 writes
