"""Optional LoRA through PEFT. With LoRA the reference model is the base model with adapters disabled, so no
second copy of the weights is kept in memory:

    with reference(policy.model):          # adapters off (a no-op context for a model without LoRA)
        ref_logp = completion_logprobs(policy.model, ...)

`add_lora` wraps every linear layer of the decoder except the LM head (`all-linear`), with dropout 0 so that
the sampler's and the trainer's log-probs agree. Only the adapter weights require gradients.
"""
from __future__ import annotations

import contextlib

from codechat import CodechatError
from codechat.config import ModelConfig


def add_lora(model, cfg: ModelConfig):
    """Wrap `model` in a `peft.PeftModel` with rank cfg.lora_r and alpha cfg.lora_alpha."""
    try:
        from peft import LoraConfig, get_peft_model  # peft: optional dependency (the lora extra), imported on use
    except ImportError:
        raise CodechatError("lora_r > 0 needs PEFT: pip install 'codechat[lora]'") from None
    lcfg = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    return get_peft_model(model, lcfg)


def is_lora(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def reference(model):
    """Context in which `model` computes the reference (base) policy: adapters disabled; no-op without LoRA."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()
