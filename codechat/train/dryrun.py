"""`codechat train --dry-run`: everything up to the first step, then one step's work measured, nothing written.

Loads the tasks and the model, applies the context guard (data.max_prompt_tokens), samples and verifies one
batch of the first sampling stage's size, runs one forward/backward of the loss on it (no optimizer step, the
weights are left as they were) and reports the time and peak memory of each part, so a config can be checked
in seconds before a long run, with the settings of the run (model.compute_dtype, model.grad_checkpointing, LoRA).
Beside the measured peak it prints an estimate of a step's peak for the configured model and batch
(train/memory.py), the figure to compare with a GPU's memory. It does not test later stages' own settings beyond
config validation.

    codechat train --config configs/grpo.yaml --dry-run
"""
from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass

import torch

from codechat.config import RunConfig
from codechat.policy import Sampler, completion_logprobs, load_policy
from codechat.policy.context import context_length
from codechat.rollout.collect import collect
from codechat.train.context import drop_long, prompt_limit
from codechat.train.memory import MemoryEstimate, estimate
from codechat.train.runner import load_task_sets
from codechat.verifier.factory import make_verifier


@dataclass
class DryRunReport:
    train_tasks: int
    """Training tasks left after the context guard."""
    eval_tasks: int
    """Held-out tasks left after the context guard."""
    context: int | None
    """The model's context length (max_position_embeddings)."""
    prompt_limit: int | None
    """The prompt token limit in force (data.max_prompt_tokens, or its default)."""
    samples: int
    """Completions sampled (prompts x group size of the first sampling stage)."""
    pass_rate: float
    """Fraction of them that passed: 0 everywhere means an RL stage would have nothing to learn from."""
    sample_s: float
    """Seconds to sample the batch."""
    verify_s: float
    """Seconds to verify it."""
    update_s: float
    """Seconds of one forward + backward of the loss over the batch (no optimizer step)."""
    peak_mem_mb: float
    """Peak accelerator memory (CUDA), else the process's peak resident memory, in MiB."""
    estimate: MemoryEstimate | None = None
    """The estimated peak of a step of this config's model and batch (train/memory.py)."""

    def lines(self) -> list[str]:
        step = self.sample_s + self.verify_s + self.update_s
        return [f"dry run: {self.train_tasks} train / {self.eval_tasks} eval tasks; context {self.context} tokens, "
                f"prompts up to {self.prompt_limit}",
                f"one step of {self.samples} samples: {step:.2f}s (sample {self.sample_s:.2f}s, verify "
                f"{self.verify_s:.2f}s, update {self.update_s:.2f}s), peak memory {self.peak_mem_mb:.0f} MiB, "
                f"pass rate {self.pass_rate:.2f}"] + ([self.estimate.line()] if self.estimate else []) + \
            ["config ok: nothing written; drop --dry-run to train"]


def _batch_shape(cfg: RunConfig) -> tuple[int, int]:
    """(prompts, samples per prompt) of the first stage that samples; SFT alone: a small batch of 2 x 2."""
    for s in cfg.stages:
        if s in ("grpo", "rloo"):
            return cfg.rl.prompts_per_step, cfg.rl.group_size
        if s == "rft":
            return min(cfg.rft.prompts, 8), cfg.rft.group_size
        if s == "dpo":
            return cfg.dpo.prompts_per_step, cfg.dpo.group_size
    return 2, 2


def peak_mb(device) -> float:
    if getattr(device, "type", "") == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def dry_run(cfg: RunConfig) -> DryRunReport:
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg.model)
    train_tasks, eval_tasks, _ = load_task_sets(cfg)
    limit = prompt_limit(cfg, policy)
    train_tasks = drop_long(train_tasks, policy, limit, "train")
    eval_tasks = drop_long(eval_tasks, policy, limit, "eval")
    P, G = _batch_shape(cfg)
    tasks = train_tasks[:P]
    if policy.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(policy.device)
    with make_verifier(cfg.verifier) as verifier:
        r = collect(policy, Sampler(policy), verifier, tasks, G, cfg.sampling, cfg.rewards, seed=cfg.seed)
    t0 = time.perf_counter()
    model, dev = policy.model, policy.device
    model.train()
    b = r.batch
    with policy.autocast():  # model.compute_dtype, as the run's update
        logp = completion_logprobs(model, r.prompts, b.prompt_index.to(dev), b.tokens.to(dev),
                                   b.mask.to(dev).float())  # (N, T)
    loss = -(logp * b.mask.to(dev)).sum() / b.mask.sum().clamp(min=1)  # (N, T) -> scalar
    loss.backward()
    model.zero_grad(set_to_none=True)
    update_s = time.perf_counter() - t0
    est = estimate(cfg, model, max(len(p) for p in r.prompts), len(r.verdicts))
    return DryRunReport(len(train_tasks), len(eval_tasks), context_length(model), limit, len(r.verdicts),
                        r.passed.float().mean().item(), r.sample_s, r.verify_s, update_s, peak_mb(dev), est)


def print_report(rep: DryRunReport) -> None:
    for line in rep.lines():
        print(line, file=sys.stdout)

