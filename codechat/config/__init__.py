"""Configuration: one dataclass per concern, a docstring under every field; the defaults of a training run.

Sections are owned by the modules that use them: VerifierConfig (sandbox/, verifier/), AlgoConfig (algos/),
RewardConfig (rollout/rewards.py), ModelConfig, SamplingConfig and RolloutConfig (policy/, rollout/), and the
stage sections SFTConfig, RFTConfig, RLConfig, DPOConfig with DataConfig, OptimConfig, EvalConfig,
CheckpointConfig, LogConfig and DistConfig (train/). RunConfig holds them all; a run saves it resolved as
config.yaml. The sections live in config/verifier.py, algo.py, rollout.py, stages.py and run.py; this module
holds RunConfig and re-exports them all. Parsing, overrides and validation: configio.py. Commands other than
`train` (eval, chat, model sample) have their own flags, whose defaults are their own.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from codechat.config.algo import AlgoConfig, RewardConfig
from codechat.config.rollout import AgentConfig, ModelConfig, RolloutConfig, SamplingConfig
from codechat.config.run import CheckpointConfig, DistConfig, EvalConfig, LogConfig
from codechat.config.stages import DataConfig, DPOConfig, OptimConfig, RFTConfig, RLConfig, SFTConfig
from codechat.config.verifier import AnswerConfig, ThinkingConfig, VerifierConfig

__all__ = ["AgentConfig", "AlgoConfig", "AnswerConfig", "CheckpointConfig", "DPOConfig", "DataConfig", "DistConfig",
           "EvalConfig", "LogConfig", "ModelConfig", "OptimConfig", "RFTConfig", "RLConfig", "RewardConfig",
           "RolloutConfig", "RunConfig", "SFTConfig", "SamplingConfig", "ThinkingConfig", "VerifierConfig"]


@dataclass
class RunConfig:
    """Everything one `codechat train` run needs; saved resolved as config.yaml in the run directory."""

    run_dir: str = "runs/default"
    """Where checkpoints, metrics.jsonl, config.yaml and plots go."""
    seed: int = 0
    """Seed of everything: data order, sampling, initialisation."""
    stages: list[str] = field(default_factory=lambda: ["grpo"])
    """Stages run in order: sft, rft, grpo, rloo, dpo (the registry: train/stages.py)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Policy model."""
    data: DataConfig = field(default_factory=DataConfig)
    """Task sets."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Rollout sampling."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout engine."""
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    """Sandboxed verifier."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """Advantages, losses, KL, aggregation."""
    rewards: RewardConfig = field(default_factory=RewardConfig)
    """Reward components and their weights (`rewards: {pass-all: 1.0, format: 0.1}` is short for `components`)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Supervised fine-tuning stage."""
    rft: RFTConfig = field(default_factory=RFTConfig)
    """Rejection-sampling fine-tuning stage."""
    rl: RLConfig = field(default_factory=RLConfig)
    """GRPO / RLOO stages."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """DPO stage."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Periodic evaluation."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing."""
    log: LogConfig = field(default_factory=LogConfig)
    """Logging."""
    dist: DistConfig = field(default_factory=DistConfig)
    """Data-parallel training across processes (torchrun)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Repository agent episodes: batching, tool output caps and timeouts."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer (AdamW) settings shared by the stages."""
