"""The stage registry: every training stage by name, with its run function, its config section, how many steps
it counts, its global batch sizes (at least one item per rank) and the checks of its settings.

    STAGES["grpo"].run(ctx)          # what `codechat train` calls for each name in cfg.stages

A new stage is one module with `run_NAME(ctx)` and one `Stage(...)` line here; configio validates the names
against this table, and the runner, the distributed checks and the step counts read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from codechat.config import RunConfig
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
    """(setting, ok) pairs: the value checks of the stage's settings."""


def _rl_checks(c: RunConfig) -> list[tuple[str, bool]]:
    one_step = c.rl.epochs == 1 and not 0 < c.rl.minibatch_size < c.rl.prompts_per_step * c.rl.group_size
    return [("rl.group_size", c.rl.group_size >= 2), ("rl.prompts_per_step", c.rl.prompts_per_step >= 1),
            ("rl.epochs", c.rl.epochs >= 1), ("rl.lr", c.rl.lr > 0), ("rl.minibatch_size", c.rl.minibatch_size >= 0),
            ("rl.grad_accum", c.rl.grad_accum >= 1), ("rl.warmup", c.rl.warmup >= 0),
            ("rl.zero_variance", c.rl.zero_variance in ("keep", "skip", "resample")),
            # reinforce has no ratio: a second optimizer step on the same rollouts would be off-policy, uncorrected
            ("algo.loss=reinforce needs one optimizer step per RL step (rl.epochs=1, no smaller rl.minibatch_size;"
             " use ppo-clip for more)", c.algo.loss != "reinforce" or one_step)]


_RL = dict(section="rl", steps=lambda c: c.rl.steps, batches=lambda c: [("rl.prompts_per_step", c.rl.prompts_per_step)],
           checks=_rl_checks)

STAGES: dict[str, Stage] = {
    "sft": Stage("sft", run_sft, "sft", lambda c: c.sft.steps, lambda c: [("sft.batch_size", c.sft.batch_size)],
                 lambda c: [("sft.lr", c.sft.lr > 0), ("sft.batch_size", c.sft.batch_size >= 1),
                            ("sft.warmup", c.sft.warmup >= 0),
                            ("sft.expert_wrong", 0.0 <= c.sft.expert_wrong <= 1.0)]),
    "rft": Stage("rft", run_rft, "rft", lambda c: c.rft.rounds * c.rft.steps, lambda c: [("rft.prompts", c.rft.prompts)],
                 lambda c: [("rft.group_size", c.rft.group_size >= 1), ("rft.lr", c.rft.lr > 0),
                            ("rft.batch_size", c.rft.batch_size >= 1), ("rft.rounds", c.rft.rounds >= 1)]),
    "grpo": Stage("grpo", run_rl, **_RL),
    "rloo": Stage("rloo", run_rl, **_RL),
    "dpo": Stage("dpo", run_dpo, "dpo", lambda c: c.dpo.steps,
                 lambda c: [("dpo.prompts_per_step", c.dpo.prompts_per_step), ("dpo.pairs_per_step", c.dpo.pairs_per_step)],
                 lambda c: [("dpo.lr", c.dpo.lr > 0), ("dpo.group_size", c.dpo.group_size >= 2)]),
}


def stage_steps(cfg: RunConfig, name: str) -> int:
    return STAGES[name].steps(cfg)


def check_stages(cfg: RunConfig) -> list[str]:
    """Problems with cfg.stages and the settings of the stages it lists: unknown names, then failed checks."""
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        return [f"stages: unknown stage '{unknown[0]}' (valid: {', '.join(STAGES)})"]
    out = []
    for name in dict.fromkeys(cfg.stages):
        out += [f"{key}: invalid value" if " " not in key else key for key, ok in STAGES[name].checks(cfg) if not ok]
    return out


def batch_sizes(cfg: RunConfig) -> list[tuple[str, int]]:
    """Every (setting, global batch size) of the run's stages (dist.check_batches wants each >= world size)."""
    return [b for name in cfg.stages for b in STAGES[name].batches(cfg)]
