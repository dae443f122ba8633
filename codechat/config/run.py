"""Evaluation, checkpoints, logging and data-parallel settings of a run (train/)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvalConfig:
    every: int = 0
    """Evaluate every N steps of a stage (0 = at stage ends only)."""
    every_stages: list[str] = field(default_factory=list)
    """The stages `every` applies to (empty = all); every stage is still evaluated at its end."""
    n: int = 4
    """Samples per task for pass@k."""
    k: list[int] = field(default_factory=lambda: [1])
    """k values for pass@k."""
    temperature: float = 1.0
    """Sampling temperature for pass@k."""
    greedy: bool = True
    """Also report greedy pass@1."""
    regression_margin: float = 0.05
    """Warn when an extra eval set falls by more than this from its value at the stage start."""


@dataclass
class CheckpointConfig:
    every: int = 50
    """Save every N steps of a stage (and always at its end)."""
    keep_last: int = 2
    """Keep the last N checkpoints (plus the best by eval pass@1)."""


@dataclass
class LogConfig:
    progress: bool = True
    """Live progress display (rich)."""
    tensorboard: bool = False
    """Also log to TensorBoard (needs the tensorboard extra)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs the wandb extra)."""
    wandb_project: str = "codechat"
    """W&B project name."""
    plot: bool = True
    """Write curves.png at the end of the run."""
    audit: bool = True
    """Keep top-reward and suspicious samples of every RL step in audit.jsonl (`codechat audit RUN_DIR`)."""
    audit_top_k: int = 2
    """Highest-reward samples kept per step besides the suspicious ones."""


@dataclass
class DistConfig:
    """Data parallelism under `torchrun --nproc_per_node N -m codechat train ...` (ignored in one process)."""

    parallel: str = "ddp"
    """`ddp`: each rank holds the whole model, gradients are summed once per optimizer step (train/dist.py).
    `fsdp`: weights, gradients and AdamW states sharded over the ranks (torch FSDP2, policy/fsdp.py): for models
    whose training state does not fit one device. Same update as `ddp`; not with LoRA."""
    backend: str = "auto"
    """torch.distributed backend: `auto` (nccl when CUDA is available, else gloo), `nccl` or `gloo`."""
    timeout_s: int = 1800
    """Collective timeout: a rank that waits longer for the others fails the run instead of hanging it."""
