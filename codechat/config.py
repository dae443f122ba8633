"""Configuration: one dataclass per concern, a docstring under every field. The only place defaults live.

Sections are owned by the modules that use them: VerifierConfig (sandbox/, verify.py), AlgoConfig (algos/),
ModelConfig and SamplingConfig (policy/, rollout.py), TrainConfig (train/). A run saves the resolved config.
"""
from __future__ import annotations

from dataclasses import dataclass, field


# --- verifier -------------------------------------------------------------------------------------------------
@dataclass
class VerifierConfig:
    workers: int = 0
    """Sandbox worker processes; 0 = one per CPU core."""
    timeout_s: float = 5.0
    """Wall-clock limit per program (a task's own timeout_s wins when set)."""
    memory_mb: int = 1024
    """Address-space limit per program, in MiB."""
    max_output_bytes: int = 65536
    """Captured stdout+stderr per program; more ends the program as `output_limit`."""
    backend: str = "local"
    """`local` (process pool on this machine) or `ray` (sandbox pools on Ray workers)."""
    nproc: int = 64
    """Processes+threads the program may have at once (RLIMIT_NPROC under its own uid): stops fork bombs."""
    nofile: int = 64
    """Open file descriptors per program process."""
    fsize_mb: int = 16
    """Largest file the program may write, in MiB."""
    max_result_mb: int = 16
    """Largest single value the program may return to the judge, in MiB (encoded)."""
    hide_paths: list[str] = field(default_factory=list)
    """Directories covered by an empty tmpfs inside the sandbox (e.g. where task files live on disk)."""


# --- algorithms -----------------------------------------------------------------------------------------------
@dataclass
class AlgoConfig:
    advantage: str = "grpo"
    """Advantage estimator: grpo, grpo-mean-only, rloo, filter."""
    std_scale: str = "group"
    """Normalise advantages by the `group` std (GRPO), the `batch` std, or `none`."""
    eps: float = 1e-6
    """Added to the std before dividing."""
    loss: str = "ppo-clip"
    """Policy loss: ppo-clip, reinforce."""
    clip_low: float = 0.2
    """PPO lower clip epsilon: ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """PPO upper clip epsilon (clip-higher: set above clip_low, e.g. 0.28)."""
    dual_clip: float = 0.0
    """Dual-clip constant c > 1 bounding the loss for negative advantages; 0 disables it."""
    tis_cap: float = 0.0
    """Truncated importance-sampling cap for sampler/trainer log-prob mismatch; 0 disables it."""
    kl_beta: float = 0.0
    """Coefficient of the KL-to-reference term; 0 disables it and loads no reference model."""
    kl_estimator: str = "k3"
    """KL estimator: k1 (log ratio), k2 (half squared log ratio), k3 (ratio - 1 - log ratio)."""
    agg: str = "token-mean"
    """Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm."""
    agg_norm: float = 0.0
    """Constant normaliser for seq-mean-token-sum-norm (Dr. GRPO); 0 = the max new tokens."""
    dpo_beta: float = 0.1
    """DPO temperature beta."""
    dpo_label_smoothing: float = 0.0
    """DPO label smoothing (conservative DPO); 0 = plain DPO."""


# --- policy and sampling --------------------------------------------------------------------------------------
@dataclass
class ModelConfig:
    path: str = "tiny"
    """A local Hugging Face model directory, or a built-in preset name (`tiny`, `small`)."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16 (bf16/fp16 on GPU)."""
    device: str = "auto"
    """`auto` (cuda when available, else cpu), `cpu`, or `cuda[:N]`."""
    lora_r: int = 0
    """LoRA rank through PEFT; 0 trains all parameters."""
    lora_alpha: int = 16
    """LoRA alpha."""
    chat: bool = False
    """Pose tasks as a chat through the tokenizer's chat template instead of plain continuation."""


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """Softmax temperature; 0 = greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1 disables it."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 disables it."""
    max_new_tokens: int = 128
    """Generation length limit per sample."""
    stop: list[str] = field(default_factory=list)
    """Stop strings; generation of a sample ends at the first one (it is kept in the text)."""
    seed: int = 0
    """Seed of the sampler's random generator."""
