"""Optional LoRA through PEFT: adapters trained, saved and resumed as adapters, the base model frozen and shared.

    with reference(policy.model):          # adapters off (a no-op context for a model without LoRA)
        ref_logp = completion_logprobs(policy.model, ...)

- `add_lora` wraps `model.lora_targets` (`all-linear`: every linear layer of the decoder but the LM head; or
  module names such as q_proj, v_proj) with rank lora_r, alpha lora_alpha and dropout 0, so that the sampler's
  and the trainer's log-probs agree. Only the adapter weights require gradients.
- The reference policy (KL, DPO) is the base model with the adapters disabled: no second copy of the weights,
  and the same base for the whole run, resumed runs included (the base is always loaded from model.path).
- A checkpoint of a LoRA run holds the adapters in PEFT's format (`adapter_config.json`,
  `adapter_model.safetensors`: the adapter weights only, no merged copy of the model) and the tokenizer;
  `adapter_config.json`'s base_model_name_or_path is the base's absolute directory. `load_policy` on such a
  directory loads that base and the adapters: trainable when resuming (lora_r > 0), merged for sampling,
  evaluation and `codechat model export` (the only place a merged model is written).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from codechat import CodechatError
from codechat.config import ModelConfig

ADAPTER_CONFIG = "adapter_config.json"


def _peft():
    try:
        import peft  # peft: optional dependency (the lora extra), imported on use
    except ImportError:
        raise CodechatError("LoRA needs PEFT: pip install 'codechat[lora]'") from None
    return peft


def add_lora(model, cfg: ModelConfig):
    """Wrap `model` in a `peft.PeftModel` with rank cfg.lora_r, alpha cfg.lora_alpha on cfg.lora_targets."""
    peft = _peft()
    targets = "all-linear" if list(cfg.lora_targets) == ["all-linear"] else list(cfg.lora_targets)
    lcfg = peft.LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules=targets,
                           task_type="CAUSAL_LM")
    try:
        return peft.get_peft_model(model, lcfg)
    except ValueError as e:  # no module of that name
        raise CodechatError(f"model.lora_targets={list(cfg.lora_targets)}: {str(e).splitlines()[0][:200]}") from None


def is_lora(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def reference(model):
    """Context in which `model` computes the reference (base) policy: adapters disabled; no-op without LoRA."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()


def is_adapter_dir(path: Path) -> bool:
    """A directory of LoRA adapters (PEFT format) rather than a whole model."""
    return (Path(path) / ADAPTER_CONFIG).is_file() and not (Path(path) / "config.json").is_file()


def adapter_base(path: Path) -> str:
    """The base model directory an adapter directory was trained on (its adapter_config.json)."""
    try:
        base = json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise CodechatError(f"{path}: unreadable {ADAPTER_CONFIG} ({e})") from None
    if not base:
        raise CodechatError(f"{path}: {ADAPTER_CONFIG} names no base model (base_model_name_or_path)")
    return str(base)


def load_adapters(model, path: Path, trainable: bool):
    """`model` with the adapters of `path`: a PeftModel whose adapters train (trainable), else merged into a plain
    model (sampling, evaluation, export)."""
    peft = _peft()
    try:
        pm = peft.PeftModel.from_pretrained(model, str(path), is_trainable=trainable)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise CodechatError(f"{path}: cannot load the LoRA adapters ({str(e).splitlines()[0][:200]})") from None
    return pm if trainable else pm.merge_and_unload()


def save_adapters(model, out: Path, base: str) -> None:
    """The adapters of a PeftModel in PEFT's format, base_model_name_or_path set to the base's directory."""
    model.save_pretrained(str(out))
    f = Path(out) / ADAPTER_CONFIG
    cfg = json.loads(f.read_text())
    cfg["base_model_name_or_path"] = base
    f.write_text(json.dumps(cfg, indent=2, sort_keys=True))
