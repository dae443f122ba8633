"""An estimate of one RL step's peak accelerator memory for a config's model and batch, printed by `--dry-run` beside
the peak it measured, so a GPU run can be sized before it starts (docs/scaling.md, "Memory rules of thumb").

    est = estimate(cfg, policy.model, prompt_tokens=300)
    print(est.line())      # estimate: 7.9 GiB = weights 1.8 + gradients 1.8 + AdamW 3.7 + ...

Terms, each in the dtype it is held in: the weights (model.dtype); their gradients and AdamW's two moments for the
trainable parameters only (LoRA: the adapters); bf16 copies of the weights that autocast keeps during a forward
(model.compute_dtype=bfloat16 over fp32 weights); the KL/DPO reference copy (none with LoRA: adapters off); the
sampler's KV cache for the whole batch; the training forward's saved activations for one micro-batch (about 35 x
hidden bytes per token per layer in the compute dtype, x2 in fp32; with model.grad_checkpointing each layer keeps
its fp32 input only and one layer is live at a time); the LM head's logits when the fused head is off
(policy/lm_head.py: three (R, V) fp32 tensors). Not counted: the allocator's fragmentation and CUDA's context
(~0.5 GiB), so the measured peak of a real step sits above it. A rule of thumb, not an accounting.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from codechat.config import RunConfig
from codechat.policy.fastlm import FastLM
from codechat.policy.lora import is_lora

ACT_BYTES_PER_HIDDEN = 35
"""Saved activation bytes per token, per layer, per hidden unit, in bf16 (docs/scaling.md)."""
GIB = 2**30


@dataclass
class MemoryEstimate:
    weights: float
    gradients: float
    adamw: float
    autocast_copies: float
    reference: float
    kv_cache: float
    activations: float
    logits: float
    """Each term in bytes (module docstring)."""

    @property
    def total(self) -> float:
        return sum(vars(self).values())

    def line(self) -> str:
        parts = " + ".join(f"{k.replace('_', ' ')} {v / GIB:.2f}" for k, v in vars(self).items() if v)
        return f"estimate for this model and batch: {self.total / GIB:.2f} GiB = {parts} (GiB)"


def _bytes(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def estimate(cfg: RunConfig, model, prompt_tokens: int, samples: int) -> MemoryEstimate:
    """Peak bytes of one RL step of `samples` completions of up to sampling.max_new_tokens after prompts of
    `prompt_tokens`, with `model` as loaded for cfg (module docstring)."""
    params = list(model.parameters())
    w = sum(p.numel() * p.element_size() for p in params)
    trainable = [p for p in params if p.requires_grad]
    g = sum(p.numel() * p.element_size() for p in trainable)
    lora = is_lora(model)
    c = model.config
    layers, hidden = c.num_hidden_layers, c.hidden_size
    head_dim = getattr(c, "head_dim", None) or hidden // c.num_attention_heads
    kv_dim = (getattr(c, "num_key_value_heads", None) or c.num_attention_heads) * head_dim
    wdt = params[0].dtype
    low = cfg.model.compute_dtype == "bfloat16" and wdt != torch.bfloat16
    cb = 2 if low else _bytes(wdt)
    frozen = sum(p.numel() for p in params if not p.requires_grad) if lora else 0
    copies = (sum(p.numel() for p in params) - frozen) * 2 if low else 0  # autocast caches casts of trainable leaves
    needs_ref = (cfg.algo.kl_beta > 0 and any(s in ("grpo", "rloo") for s in cfg.stages)) or "dpo" in cfg.stages
    seq = prompt_tokens + cfg.sampling.max_new_tokens
    kv = samples * seq * layers * 2 * kv_dim * cb
    micro = max(1, -(-samples // max(1, cfg.rl.grad_accum)))
    if cfg.rl.minibatch_size:
        micro = max(1, -(-min(samples, cfg.rl.minibatch_size) // max(1, cfg.rl.grad_accum)))
    if cfg.rl.micro_batch_tokens and params[0].device.type == "cpu":  # rl_update's micro_count, full rows
        n = -(-micro * cfg.sampling.max_new_tokens // cfg.rl.micro_batch_tokens)
        micro = -(-micro // max(1, n))
    tokens = micro * seq
    per_layer = ACT_BYTES_PER_HIDDEN * hidden * (cb / 2)
    acts = tokens * (layers * hidden * 4 + per_layer) if cfg.model.grad_checkpointing else tokens * layers * per_layer
    rows = micro * cfg.sampling.max_new_tokens
    logits = 0 if FastLM.supports(model) else 3 * rows * c.vocab_size * 4  # the fast path fuses the head (lm_head.py)
    return MemoryEstimate(weights=w, gradients=g, adamw=2 * g, autocast_copies=copies,
                          reference=w if needs_ref and not lora else 0, kv_cache=kv, activations=acts, logits=logits)
