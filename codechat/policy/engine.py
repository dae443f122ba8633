"""The rollout engine interface: what the trainer asks of a sampler, and the registry of engines by name.

    engine = make_engine(policy, cfg.rollout, cfg.sampling)     # rollout.engine: hf | vllm
    with sampling_weights(engine, policy.model):                 # FSDP: whole weights while it samples
        batch = engine.sample(prompt_ids, n, sampling_cfg)       # -> SampleBatch (token ids, masks, log-probs)
    push_weights(engine, policy.model)                           # after each update
    engine.close()                                               # at the end of the run

An engine knows token ids only (STYLE habit 3): prompts in, `SampleBatch` out. Two implement it: codechat's
KV-cache `Sampler` (policy/sampler.py), which samples the training model itself, and `VLLMSampler`
(policy/vllm_engine.py), which holds its own copy of the weights and is refreshed in memory. Adding one is a new
module with the three methods and one `ENGINES` line.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Protocol

import torch

from codechat import CodechatError
from codechat.config import RolloutConfig, SamplingConfig
from codechat.policy.fsdp import full_weights
from codechat.policy.sampler import SampleBatch, Sampler


class RolloutEngine(Protocol):
    samples_training_weights: bool
    """True: samples the training model itself (an FSDP trainer gathers its weights around a rollout, and
    `update_weights` has nothing to do); False: holds its own copy of the weights, refreshed by `update_weights`."""

    def sample(self, prompts: list[list[int]], n: int, cfg: SamplingConfig,
               on_finish: Callable[[int, str], None] | None = None, keys: list | None = None,
               max_new: list[int] | None = None) -> SampleBatch:
        """P prompts (token ids) x n samples each -> SampleBatch, the samples of a prompt contiguous, with the
        log-prob of every token under the distribution it was sampled from. on_finish(row, text), when given,
        is called once per sample with its final text, as early as the engine knows it. keys (n = 1): one id
        per prompt whose context grows from call to call (an episode); the engine may reuse its KV. max_new: one
        token budget per prompt (each row stops at its own), else cfg.max_new_tokens for all."""

    def update_weights(self, model: torch.nn.Module) -> None:
        """Take `model`'s current (whole) parameters; called after every optimizer update."""

    # An engine with its own weights also offers, for the async producer (train/producer.py), which samples in
    # another thread while the trainer updates: snapshot(model) -> a detached copy of `model`'s weights in the
    # engine's own form (taken by the trainer), and load_snapshot(snapshot) (called by the producer).

    def release_kv(self) -> None:
        """Forget whatever was kept for keyed contexts (called when a batch of episodes has ended)."""

    def close(self) -> None:
        """Release the engine (called once, after the run's last barrier)."""


def _hf(policy, rollout: RolloutConfig, sampling: SamplingConfig) -> RolloutEngine:
    return Sampler(policy, max_rows=rollout.max_rows)


def _vllm(policy, rollout: RolloutConfig, sampling: SamplingConfig) -> RolloutEngine:
    from codechat.policy.vllm_engine import VLLMSampler  # vllm: a heavy optional dependency, imported on use
    return VLLMSampler(policy, rollout, sampling)


ENGINES: dict[str, Callable[..., RolloutEngine]] = {"hf": _hf, "vllm": _vllm}
"""rollout.engine name -> constructor(policy, RolloutConfig, SamplingConfig)."""


def make_engine(policy, rollout: RolloutConfig, sampling: SamplingConfig) -> RolloutEngine:
    """The engine named by `rollout.engine`, started from the policy's current (under FSDP: gathered) weights."""
    if rollout.engine not in ENGINES:
        raise CodechatError(f"rollout.engine: unknown engine '{rollout.engine}' (valid: {', '.join(ENGINES)})")
    with full_weights(policy.model):  # FSDP: each rank's engine starts from the whole weights
        return ENGINES[rollout.engine](policy, rollout, sampling)


def sampling_weights(engine: RolloutEngine, model: torch.nn.Module):
    """Context for one rollout: the training model's whole weights when the engine samples it (one FSDP gather
    for the whole rollout; a no-op otherwise)."""
    return full_weights(model) if engine.samples_training_weights else contextlib.nullcontext()


def push_weights(engine: RolloutEngine, model: torch.nn.Module) -> None:
    """Hand the updated weights to an engine that holds its own copy (gathered first under FSDP)."""
    if engine.samples_training_weights:
        return
    with full_weights(model):
        engine.update_weights(model)
