"""What `codechat compare` runs: the methods (`codechat train` overrides on top of the demo's settings), the
claim presets, and the stage lengths that spend a budget of sampled completions.

A run of (method, seed) goes to the largest budget and is evaluated at every budget on the way (a curve point),
so budgets 5,120 / 12,800 / 25,600 cost one run, not three. Budgets count rollout completions (the trainer's
cumulative `samples`, RFT's grow samples included); evaluation samples are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from codechat import CodechatError

RL = ["rl.prompts_per_step=16", "rl.group_size=8"]
PER_RL_STEP = 16 * 8
"""Completions per GRPO/RLOO/DPO step (16 prompts x 8)."""

METHODS: dict[str, list[str]] = {
    "grpo": ["stages=[grpo]", *RL],
    "rloo": ["stages=[rloo]", *RL],
    "rft": ["stages=[rft]"],
    "rft-grpo": ["stages=[rft,grpo]", "rft.rounds=1", *RL],
    "dpo": ["stages=[dpo]", "dpo.prompts_per_step=16", "dpo.group_size=8", "dpo.pairs_per_step=32", "dpo.lr=2e-5",
            "algo.dpo_beta=0.1"],
}
"""Each method's overrides on top of the demo's settings (codechat/demos/demo.py)."""

RUN: list[str] = ["data.eval=", "eval.every=0", "checkpoint.every=20", "checkpoint.keep_last=1", "log.plot=false"]
"""Overrides of every compare run: no in-trainer evaluation (compare evaluates each budget point itself, per
task), a checkpoint every 20 steps so an interrupted run resumes near where it stopped."""


@dataclass(frozen=True)
class Preset:
    """A named comparison: which methods, at which budgets, with which extra overrides, and why."""

    methods: list[str]
    """Methods compared (keys of METHODS)."""
    budgets: list[int]
    """Curve points in sampled completions, increasing; the run goes to the last one."""
    overrides: list[str] = field(default_factory=list)
    """`codechat train` overrides of every run of the preset, after the method's."""
    what: str = ""
    """The claim it tests, one line."""


PRESETS: dict[str, Preset] = {
    "curves": Preset(list(METHODS), [5120, 12800, 25600], [],
                     "all five methods from one SFT checkpoint, curves over 5,120 / 12,800 / 25,600 completions"),
    "rloo-claim": Preset(["grpo", "rloo"], [1280, 2560, 3840, 5120],
                         ["rl.lr=1e-3", "rl.epochs=4", "rewards.components={pass-all: 1.0, pass-fraction: 0.1}"],
                         "RLOO vs GRPO where clipping is frequent (lr 1e-3, 4 inner epochs) and group variances are "
                         "very unequal (a 0.1 partial-credit term: groups that all fail differ only by it, and GRPO's "
                         "std division scales them up to the size of pass/fail groups)"),
    "warmup-claim": Preset(["grpo", "rft-grpo"], [2560, 5120, 7680, 10240, 12800], [],
                           "samples to a target held-out pass rate: GRPO alone vs one RFT round then GRPO, the RFT "
                           "round's 1,024 samples counted"),
}
"""The claims of the design notes as comparisons (`codechat compare --preset NAME`)."""


def rft_round(cfg) -> int:
    """Completions one RFT round samples (cfg = the demo's defaults)."""
    return cfg.rft.prompts * cfg.rft.group_size


def stage_overrides(method: str, budget: int, cfg) -> list[str]:
    """Stage lengths that spend `budget` completions with the method's batch shape (cfg = demo defaults).
    Budgets are rounded down to whole steps (RFT: whole rounds)."""
    if method in ("grpo", "rloo"):
        return [f"rl.steps={max(1, budget // PER_RL_STEP)}"]
    if method == "rft":
        return [f"rft.rounds={max(1, budget // rft_round(cfg))}"]
    if method == "rft-grpo":
        return [f"rl.steps={max(1, (budget - rft_round(cfg)) // PER_RL_STEP)}"]
    if method == "dpo":
        return [f"dpo.steps={max(1, budget // PER_RL_STEP)}"]
    raise CodechatError(f"compare: unknown method '{method}' (valid: {', '.join(METHODS)})")


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise CodechatError(f"compare: --methods: unknown method(s) '{', '.join(bad)}' (valid: {', '.join(METHODS)})"
                            if bad else "compare: --methods: expected at least one method")
    return methods


def parse_ints(text: str, what: str, positive: bool = True) -> list[int]:
    """Comma-separated integers (seeds or budgets); budgets must be positive and strictly increasing."""
    try:
        xs = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise CodechatError(f"compare: {what}: expected comma-separated integers, got '{text}'") from None
    if not xs:
        raise CodechatError(f"compare: {what}: expected at least one integer, got '{text}'")
    if positive and (min(xs) <= 0 or any(b <= a for a, b in zip(xs, xs[1:]))):
        raise CodechatError(f"compare: {what}: expected positive, strictly increasing integers, got '{text}'")
    if not positive and (min(xs) < 0 or len(set(xs)) != len(xs)):
        raise CodechatError(f"compare: {what}: expected distinct integers >= 0, got '{text}'")
    return xs


def min_budget(method: str, cfg) -> int:
    """The smallest budget the method can spend (rft-grpo: its RFT round plus one GRPO step)."""
    return {"rft": rft_round(cfg), "rft-grpo": rft_round(cfg) + PER_RL_STEP}.get(method, PER_RL_STEP)
