"""The sampler-trainer log-prob gap on a fixed probe batch (`rl.probe_every`), with a warning when it drifts.

Every `rl.probe_every` RL steps, the sampler that produced the step's batch samples one completion for each of
a fixed set of probe prompts (the first `rl.probe_prompts` of the stage's data order, a fixed seed) and records
its log-probs: the run's engine in the synchronous loop; under `rl.async_steps` the producer's copy of the
model, in the producer thread, with that batch's (older) weights. Before the update the trainer scores the same
tokens with its current weights:

    probe/kl       token mean of (sampler - trainer) log-prob: the k1 estimate of KL(sampler || trainer) on the
                   sampler's own tokens
    probe/max_abs  the largest |sampler - trainer| log-prob of a probe token
    probe/drift    1 when probe/kl > rl.probe_warn_kl (a warning names the step and the likely causes)

The gap is what the off-policy corrections see: the engine's numerics (vLLM's kernels or bf16 against the
trainer's forward) plus, with async_steps, the staleness of the behaviour weights. Unlike the per-batch
`logp_gap_*`, the probe's prompts do not change, so its trend over a run is comparable from step to step.
Simplifies: the probe completions are re-sampled each time (fixed prompts and seed, not fixed tokens); with
top-k/top-p the sampler's log-probs are renormalised over the kept tokens and so sit above the trainer's by
design (probe/kl > 0 at equal weights); repository-task (episode) batches are not probed.

    codechat train --config configs/grpo.yaml rl.probe_every=5 rl.probe_warn_kl=0.05
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import torch

from codechat import CodechatError
from codechat.policy import completion_logprobs
from codechat.policy.sampler import SampleBatch
from codechat.rollout.collect import prompt_text
from codechat.tasks.repo import RepoTask
from codechat.train.common import Context, take


@dataclass
class ProbeBatch:
    """What the sampler produced on the probe prompts."""

    prompts: list[list[int]]
    """The probe prompts' token ids."""
    batch: SampleBatch
    """One completion per prompt, with the sampler's log-probs (N, T)."""
    step: int
    """The RL step of the batch the sampler produced alongside it."""


class GapProbe:
    def __init__(self, ctx: Context):
        c = ctx.cfg.rl
        if c.probe_every < 0:
            raise CodechatError(f"rl.probe_every must be >= 0 (0 = off), got {c.probe_every}")
        if c.probe_every and c.probe_prompts < 1:
            raise CodechatError(f"rl.probe_prompts must be >= 1, got {c.probe_prompts}")
        if c.probe_every and not c.probe_warn_kl > 0:
            raise CodechatError(f"rl.probe_warn_kl must be > 0, got {c.probe_warn_kl}")
        self.ctx, self.every, self.warn_kl = ctx, c.probe_every, c.probe_warn_kl
        tasks = take(ctx.train_tasks, ctx.cfg.seed + ctx.state.stage_idx, 0, c.probe_prompts) if self.every else []
        self.tasks = [t for t in tasks if not isinstance(t, RepoTask)]
        self.prompts = [ctx.policy.encode_prompt(prompt_text(t)) for t in self.tasks]

    def due(self, step: int) -> bool:
        return bool(self.every and self.prompts and step % self.every == 0)

    def sample(self, sampler, step: int) -> ProbeBatch | None:
        """The probe completions from `sampler` (whatever weights it holds now) when `step` is due, else None."""
        if not self.due(step):
            return None
        cfg = dataclasses.replace(self.ctx.cfg.sampling, seed=self.ctx.cfg.seed * 7 + 4242)  # the same each time
        return ProbeBatch(self.prompts, sampler.sample(self.prompts, 1, cfg), step)

    def gap(self, probe: ProbeBatch | None, model) -> dict[str, float]:
        """probe/kl, probe/max_abs, probe/drift of the probe batch against `model`'s current weights."""
        if probe is None:
            return {}
        b, temp = probe.batch, self.ctx.cfg.sampling.temperature
        dev = next(model.parameters()).device
        with torch.no_grad(), self.ctx.policy.autocast():
            trainer = completion_logprobs(model, probe.prompts, b.prompt_index.to(dev), b.tokens.to(dev),
                                          b.mask.to(dev), temperature=temp if temp > 0 else 1.0)  # (N, T)
        m = b.mask.to(dev)  # (N, T)
        d = (b.logprobs.to(dev) - trainer) * m  # (N, T) sampler - trainer
        kl = (d.sum() / m.sum().clamp(min=1)).item()
        out = {"probe/kl": kl, "probe/max_abs": d.abs().max().item(), "probe/drift": float(kl > self.warn_kl)}
        if kl > self.warn_kl:
            warnings.warn(f"step {probe.step + 1}: the sampler-trainer log-prob gap on the probe batch drifted: "
                          f"probe/kl={kl:.4g} > rl.probe_warn_kl={self.warn_kl:g} (max |gap| "
                          f"{out['probe/max_abs']:.3g}); stale async weights (lower rl.async_steps), an engine "
                          f"mismatch (rollout.vllm_dtype) or top-k/top-p truncation widen it")
        return out
