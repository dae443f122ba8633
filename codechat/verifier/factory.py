"""`make_verifier(cfg)`: the one place that maps `verifier.backend` to an implementation of the `Verifier` API."""
from __future__ import annotations

import dataclasses

from codechat import CodechatError
from codechat.config import VerifierConfig
from codechat.verifier.ray_backend import RayVerifier  # light: it imports ray only when a RayVerifier starts
from codechat.verifier.plus import PlusVerifier
from codechat.verifier.verify import Verifier

BACKENDS = ("local", "ray")


def make_verifier(cfg: VerifierConfig | None = None) -> Verifier:
    """`Verifier` for `cfg.backend`: `local` (process pool here) or `ray` (a sandbox pool per Ray node); with
    cfg.plus_inputs, evalplus tasks judged on their plus inputs too (verifier/plus.py)."""
    cfg = cfg or VerifierConfig()
    if cfg.workers < 0:  # a negative pool size waits forever for workers that never start
        raise CodechatError(f"verifier workers must be >= 0 (0 = one per CPU core), got {cfg.workers}")
    if cfg.backend in BACKENDS:
        v = Verifier(cfg) if cfg.backend == "local" else RayVerifier(cfg)
        return PlusVerifier(v) if cfg.plus_inputs else v  # MBPP+/HumanEval+: plus inputs in the verdict
    raise CodechatError(f"verifier.backend '{cfg.backend}' is not available (valid: {', '.join(BACKENDS)})")


PARTIAL_CREDIT = frozenset({"pass-fraction"})
"""Rewards that read how many tests passed, not only whether all did."""


def training_verifier_config(cfg: VerifierConfig, rewards: dict[str, float]) -> VerifierConfig:
    """The verifier settings training runs with: with `stop_in_training` and no reward reading tests_passed
    (`PARTIAL_CREDIT`), stdin/stdout completions stop at their first failing test (`stop_at_first_failure`)."""
    if cfg.stop_in_training and not any(rewards.get(name) for name in PARTIAL_CREDIT):
        return dataclasses.replace(cfg, stop_at_first_failure=True)
    return cfg
