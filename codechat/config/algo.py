"""Advantages, losses, KL and aggregation (algos/); reward components (rollout/rewards.py)."""
from __future__ import annotations

from dataclasses import dataclass, field


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
    """Weight prompts by difficulty: advantages times (1 - running pass rate)^alpha, mean 1 over the batch of
    all ranks; 0 = off. The rates (prior 0.5) are updated from every step's pass results and checkpointed."""
    difficulty_ema: float = 0.9
    """Decay of the running per-prompt pass rate behind difficulty weighting (rate = ema*old + (1-ema)*step's)."""
    loss: str = "ppo-clip"
    """Policy loss: ppo-clip, reinforce, gspo, cispo (DPO has its own signature: algos.dpo_loss)."""
    clip_low: float = 0.2
    """PPO lower clip epsilon: ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """PPO upper clip epsilon (clip-higher: set above clip_low, e.g. 0.28)."""
    dual_clip: float = 0.0
    """Dual-clip constant c > 1 bounding the loss for negative advantages; 0 disables it."""
    tis_cap: float | None = None
    """Cap of the off-policy correction (`correction`: tis, seq-is, seq-tis) for sampler/trainer log-prob mismatch,
    e.g. 2; 0 disables it. None (the default): 2 when rl.async_steps > 0 (stale batches are corrected from the
    weights that sampled them, as in decoupled PPO), else 0 (the sampler is the trainer's weights)."""
    kl_beta: float = 0.0
    """Coefficient of the KL-to-reference term; 0 disables it and loads no reference model."""
    kl_estimator: str = "k3"
    """KL estimator of the loss term: k2 (half squared log ratio; gradient = that of KL(pi || ref)) or k3
    (ratio - 1 - log ratio; gradient = that of KL(ref || pi)). k1 (the log ratio) has zero expected gradient:
    refused as a loss (algos/kl.py)."""
    agg: str = "token-mean"
    """Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, turn-mean
    (each turn of an episode weighs the same: a turn is a run of model tokens between tool results)."""
    agg_norm: float = 0.0
    """Constant normaliser for seq-mean-token-sum-norm (Dr. GRPO); 0 = the generation budget:
    sampling.max_new_tokens, for repository tasks the episode's model-token budget (the RL stages resolve it so;
    algos.agg_loss called directly with 0 divides by the padded length T)."""
    dpo_beta: float = 0.1
    """DPO temperature beta."""
    dpo_label_smoothing: float = 0.0
    """DPO label smoothing (conservative DPO); 0 = plain DPO."""
    dpo_nll: float = 0.0
    """Weight of a negative log-likelihood term on the chosen side, per scored token (RPO, Pang et al. 2024):
    loss = DPO + dpo_nll * mean(-log pi(chosen) / its tokens). Keeps DPO from pushing the chosen answer's
    likelihood down along with the rejected one's; 0 = plain DPO."""
    correction: str = "tis"
    """Off-policy correction against the sampler's log-probs (algos/corrections.py): tis (token ratio capped at
    tis_cap), seq-is (GSPO geometric-mean sequence ratio capped at tis_cap), icepop (token ratios outside
    [icepop_low, icepop_high] masked out), seq-tis (the sequence's product ratio capped at tis_cap)."""
    icepop_low: float = 0.5
    """`icepop`: tokens whose ratio pi_old / pi_sampler is below this are dropped from the loss."""
    icepop_high: float = 2.0
    """`icepop`: tokens whose ratio pi_old / pi_sampler is above this are dropped from the loss."""


@dataclass
class RewardConfig:
    components: dict[str, float] = field(default_factory=lambda: {"pass-all": 1.0})
    """Reward name -> weight; the reward is the weighted sum (pass-all, pass-fraction, format, overlong, length, safety,
    tool-calls, protected-edit)."""
    format_fenced: bool = True
    """`format` expects exactly one fenced code block; False = the completion continues the prompt's code."""
    overlong_buffer: int = 0
    """`overlong`: tokens before max_new_tokens where the penalty ramps 0 -> -1 (DAPO); 0 = a quarter of max."""
    length_budget: int = 256
    """`length`: tokens allowed before the per-token penalty starts."""
    length_per_token: float = 0.001
    """`length`: penalty per token beyond length_budget."""
    nothink_margin: float = 0.02
    """`nothink-bonus` constraint: pass rate may drop at most this much below the reference's (nothink_ref_steps)."""
    nothink_lr: float = 0.0
    """`nothink-bonus`: step size of the Lagrange multiplier on the pass-rate constraint; 0 = fixed bonus."""
    nothink_ref_steps: int = 1
    """`nothink-bonus`: the reference pass rate is the mean of the first this many steps' (lambda held at 0 until
    then); 1 = the first step's."""
    malformed_opening_penalty: float = 0.0
    """With verifier.thinking on: subtracted from the reward of a completion that opens (blanks aside) with neither
    the open nor the close tag, e.g. `<thinkXthink>`, so a mangled tag scores below a clean failed answer; 0 = off
    (such completions only lose their `nothink-bonus`). rollout/thinking.py penalise_malformed."""
