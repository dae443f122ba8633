"""The stage registry: every training stage by name, with its run function, its config section, how many steps
it counts, its global batch sizes (at least one item per rank) and the checks of its settings.

    STAGES["grpo"].run(ctx)          # what `codechat train` calls for each name in cfg.stages

A new stage is one module with `run_NAME(ctx)` and one `Stage(...)` line here; `check_stages`, registered with
config validation (config/checks.py), checks names and settings against this table, and the runner, the
distributed checks and the step counts read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from codechat.config import RunConfig
from codechat.config.checks import register_check
from codechat.rollout.expert import EDIT_FORMS
from codechat.train.dpo import run_dpo
from codechat.train.rft import run_rft
from codechat.train.rl import run_rl
from codechat.train.sft import run_sft


@dataclass(frozen=True)
class Stage:
    name: str
    """The name in cfg.stages."""
    run: Callable
    """run(ctx: train.common.Context): runs the stage from ctx.state.step to `steps(cfg)`."""
    section: str
    """The RunConfig field holding the stage's own settings."""
    steps: Callable[[RunConfig], int]
    """Steps the stage counts (its share of global_step)."""
    batches: Callable[[RunConfig], list[tuple[str, int]]]
    """(setting, global batch size) pairs that must be at least the number of ranks."""
    checks: Callable[[RunConfig], list[tuple[str, bool]]]
    """(message, ok) pairs: the value checks of the stage's settings; the message names the setting, the allowed
    range and the value (see `at_least`)."""


def at_least(key: str, value, lo) -> tuple[str, bool]:
    """A (message, ok) check: `key` must be >= lo; the message gives the allowed range and the value."""
    return f"{key}: expected >= {lo}, got {value}", value >= lo


def positive(key: str, value) -> tuple[str, bool]:
    return f"{key}: expected > 0, got {value}", value > 0


def _sampled_groups(c: RunConfig, stage: str) -> tuple[str, bool]:
    # at temperature 0 every sample of a group is the same: no group variance (GRPO/RLOO), no pair (DPO)
    return (f"sampling.temperature: expected > 0 for stage {stage} (at 0 every sample of a group is the same, "
            f"so there is nothing to learn from), got {c.sampling.temperature}", c.sampling.temperature > 0)


def _rl_checks(c: RunConfig, stage: str) -> list[tuple[str, bool]]:
    one_step = c.rl.epochs == 1 and not 0 < c.rl.minibatch_size < c.rl.prompts_per_step * c.rl.group_size
    return [at_least("rl.steps", c.rl.steps, 0), at_least("rl.group_size", c.rl.group_size, 2),
            at_least("rl.prompts_per_step", c.rl.prompts_per_step, 1), at_least("rl.epochs", c.rl.epochs, 1),
            positive("rl.lr", c.rl.lr), at_least("rl.minibatch_size", c.rl.minibatch_size, 0),
            at_least("rl.grad_accum", c.rl.grad_accum, 1), at_least("rl.warmup", c.rl.warmup, 0),
            at_least("rl.micro_batch_tokens", c.rl.micro_batch_tokens, 0),
            at_least("rl.embed_lr_scale", c.rl.embed_lr_scale, 0),
            (f"rl.zero_variance: expected keep, skip or resample, got '{c.rl.zero_variance}'",
             c.rl.zero_variance in ("keep", "skip", "resample")), _sampled_groups(c, stage),
            # reinforce has no ratio: a second optimizer step on the same rollouts would be off-policy, uncorrected
            ("algo.loss=reinforce needs one optimizer step per RL step (rl.epochs=1, no smaller rl.minibatch_size;"
             " use ppo-clip for more)", c.algo.loss != "reinforce" or one_step)]


_RL = dict(section="rl", steps=lambda c: c.rl.steps, batches=lambda c: [("rl.prompts_per_step", c.rl.prompts_per_step)])

STAGES: dict[str, Stage] = {
    "sft": Stage("sft", run_sft, "sft", lambda c: c.sft.steps, lambda c: [("sft.batch_size", c.sft.batch_size)],
                 lambda c: [at_least("sft.steps", c.sft.steps, 0), positive("sft.lr", c.sft.lr),
                            at_least("sft.batch_size", c.sft.batch_size, 1), at_least("sft.warmup", c.sft.warmup, 0),
                            (f"sft.expert_wrong: expected in [0, 1], got {c.sft.expert_wrong}",
                             0.0 <= c.sft.expert_wrong <= 1.0),
                            at_least("sft.expert_per_task", c.sft.expert_per_task, 1),
                            (f"sft.expert_recover: expected in [0, 1], got {c.sft.expert_recover}",
                             0.0 <= c.sft.expert_recover <= 1.0),
                            (f"sft.expert_edit: expected one of {', '.join(EDIT_FORMS)}, got {c.sft.expert_edit!r}",
                             c.sft.expert_edit in EDIT_FORMS)]),
    "rft": Stage("rft", run_rft, "rft", lambda c: c.rft.rounds * c.rft.steps, lambda c: [("rft.prompts", c.rft.prompts)],
                 lambda c: [at_least("rft.steps", c.rft.steps, 0), at_least("rft.group_size", c.rft.group_size, 1),
                            positive("rft.lr", c.rft.lr), at_least("rft.batch_size", c.rft.batch_size, 1),
                            at_least("rft.rounds", c.rft.rounds, 1), at_least("rft.prompts", c.rft.prompts, 1)]),
    "grpo": Stage("grpo", run_rl, **_RL, checks=lambda c: _rl_checks(c, "grpo")),
    "rloo": Stage("rloo", run_rl, **_RL, checks=lambda c: _rl_checks(c, "rloo")),
    "dpo": Stage("dpo", run_dpo, "dpo", lambda c: c.dpo.steps,
                 lambda c: [("dpo.prompts_per_step", c.dpo.prompts_per_step), ("dpo.pairs_per_step", c.dpo.pairs_per_step)],
                 lambda c: [at_least("dpo.steps", c.dpo.steps, 0), positive("dpo.lr", c.dpo.lr),
                            at_least("dpo.group_size", c.dpo.group_size, 2),
                            at_least("dpo.prompts_per_step", c.dpo.prompts_per_step, 1),
                            at_least("dpo.pairs_per_step", c.dpo.pairs_per_step, 1), _sampled_groups(c, "dpo")]),
}


def stage_steps(cfg: RunConfig, name: str) -> int:
    return STAGES[name].steps(cfg)


@register_check
def check_stages(cfg: RunConfig) -> list[str]:
    """Problems with cfg.stages and the settings of the stages it lists: unknown names, then failed checks."""
    if not cfg.stages:
        return [f"stages: expected at least one of {', '.join(STAGES)}, got []"]
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        return [f"stages: unknown stage {unknown[0]!r} (valid: {', '.join(STAGES)})"]
    unknown = [s for s in cfg.eval.every_stages if s not in STAGES]
    if unknown:
        return [f"eval.every_stages: unknown stage {unknown[0]!r} (valid: {', '.join(STAGES)})"]
    out = []
    for name in dict.fromkeys(cfg.stages):
        out += [msg for msg, ok in STAGES[name].checks(cfg) if not ok]
    return out


def batch_sizes(cfg: RunConfig) -> list[tuple[str, int]]:
    """Every (setting, global batch size) of the run's stages (dist.check_batches wants each >= world size)."""
    return [b for name in cfg.stages for b in STAGES[name].batches(cfg)]
