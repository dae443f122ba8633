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


# --- algorithms -----------------------------------------------------------------------------------------------
@dataclass
class AlgoConfig:
    advantage: str = "grpo"
    """Advantage estimator: grpo, grpo-mean-only (Dr. GRPO), rloo, filter (RFT), batch-mean."""
    std_scale: str = "group"
    """grpo divides by the `group` std (DeepSeekMath), the `batch` std of the rewards, or `none`."""
    eps: float = 1e-6
    """Added to the std before dividing."""
    filter_threshold: float = 1.0
    """`filter` advantage: samples whose reward is at least this get 1, the rest 0."""
    difficulty_alpha: float = 0.0
    """Weight prompts by difficulty: advantages times (1 - running pass rate)^alpha, batch mean 1; 0 = off."""
    difficulty_ema: float = 0.9
    """Decay of the running per-prompt pass rate behind difficulty weighting."""
    loss: str = "ppo-clip"
    """Policy loss: ppo-clip, reinforce (DPO has its own signature: algos.dpo_loss)."""
    clip_low: float = 0.2
    """PPO lower clip epsilon: ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """PPO upper clip epsilon (clip-higher: set above clip_low, e.g. 0.28)."""
    dual_clip: float = 0.0
    """Dual-clip constant c > 1 bounding the loss for negative advantages; 0 disables it."""
    tis_cap: float = 0.0
    """Truncated importance-sampling cap for sampler/trainer log-prob mismatch (e.g. 2); 0 disables it."""
    kl_beta: float = 0.0
    """Coefficient of the KL-to-reference term; 0 disables it and loads no reference model."""
    kl_estimator: str = "k3"
    """KL estimator: k1 (log ratio), k2 (half squared log ratio), k3 (ratio - 1 - log ratio)."""
    agg: str = "token-mean"
    """Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm."""
    agg_norm: float = 0.0
    """Constant normaliser for seq-mean-token-sum-norm (Dr. GRPO); set it to max_new_tokens; 0 = padded length T."""
    dpo_beta: float = 0.1
    """DPO temperature beta."""
    dpo_label_smoothing: float = 0.0
    """DPO label smoothing (conservative DPO); 0 = plain DPO."""


# --- rewards --------------------------------------------------------------------------------------------------
@dataclass
class RewardConfig:
    components: dict[str, float] = field(default_factory=lambda: {"pass-all": 1.0})
    """Reward name -> weight; the reward is the weighted sum (pass-all, pass-fraction, format, overlong, length, safety)."""
    format_fenced: bool = True
    """`format` expects exactly one fenced code block; False = the completion continues the prompt's code."""
    overlong_buffer: int = 0
    """`overlong`: tokens before max_new_tokens where the penalty ramps 0 -> -1 (DAPO); 0 = a quarter of max."""
    length_budget: int = 256
    """`length`: tokens allowed before the per-token penalty starts."""
    length_per_token: float = 0.001
    """`length`: penalty per token beyond length_budget."""


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
