"""Policies: a Hugging Face causal LM + its tokenizer, loaded from a local directory or a built-in preset.

`load_policy(ModelConfig(path=...))` accepts a preset name (`tiny`, `small`, `qwen2.5`, `qwen3`; built once into the cache, see
presets.py) or a local model directory. No hub access: `local_files_only=True` everywhere, and a path that
does not exist is an error, never a hub id.

Errors (CodechatError, one line naming the path): missing path, a directory without config.json, a config.json
that is not a causal LM, a directory without a tokenizer (no tokenizer file, or one with no vocabulary beyond
its special tokens: transformers would build an empty one from config.json alone). Documented fix-up: a
tokenizer without a pad token gets pad = eos (a warning says so); a tokenizer with neither is an error.

Prompts: `encode_prompt(text)` applies the tokenizer's chat template (one user turn, generation prompt added)
when `ModelConfig.chat`, else encodes `text` as a plain continuation (with BOS if the tokenizer adds one).
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from codechat import CodechatError
from codechat.config import ModelConfig
from codechat.policy import fsdp
from codechat.policy.lora import adapter_base, add_lora, is_adapter_dir, is_lora, load_adapters, save_adapters
from codechat.policy.precision import bound_kernel_caches, compute_autocast
from codechat.policy.presets import PRESET_NAMES, preset_dir, save_tokenizer
from codechat.io.rundir import resolve_model

log = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class Policy:
    model: object
    """The causal LM (`transformers.PreTrainedModel`, or a `peft.PeftModel` when LoRA is on)."""
    tokenizer: object
    """Its tokenizer; pad_token_id is always set."""
    device: object
    """`torch.device` the model lives on."""
    config: ModelConfig
    """The config it was loaded with."""
    eos_token_ids: tuple[int, ...] = ()
    """Token ids that end a sample: the tokenizer's EOS plus generation_config.eos_token_id."""
    base_path: str = ""
    """The base model's directory (absolute): what a LoRA checkpoint's adapters name as their base."""

    def encode_prompt(self, text: str) -> list[int]:
        """Chat template (config.system_prompt's system turn when set, one user turn, generation prompt) when
        config.chat, else plain continuation."""
        tok = self.tokenizer
        if self.config.chat:
            if not getattr(tok, "chat_template", None):
                raise CodechatError(f"{self.config.path}: chat=true but the tokenizer has no chat template")
            system = [{"role": "system", "content": self.config.system_prompt}] if self.config.system_prompt else []
            ids = tok.apply_chat_template([*system, {"role": "user", "content": text}], add_generation_prompt=True,
                                          tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in transformers 5
                ids = ids["input_ids"]
            return list(ids)
        return list(tok(text, add_special_tokens=True)["input_ids"])

    def autocast(self):
        """The context of every forward: bf16 autocast over the weights when config.compute_dtype asks for it
        (mixed precision, policy/precision.py), else a no-op."""
        return compute_autocast(self.config.compute_dtype, self.device, next(self.model.parameters()).dtype)

    def decode(self, ids) -> str:
        """Text of token ids, special tokens (EOS, pad, chat markers) dropped."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def save(self, out_dir, state_dict: dict | None = None) -> Path:
        """Save in HF format, loadable by load_policy (and from_pretrained); with LoRA the adapters alone in
        PEFT's format, naming base_path as their base (policy/lora.py). state_dict: the weights to write instead
        of the model's own (an FSDP model's gathered weights)."""
        quiet_transformers()
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        model = self.model
        if is_lora(model):
            save_adapters(model, out, self.base_path)
        elif _rank() == 0 and not fsdp.is_sharded(model):
            model.save_pretrained(out, **({"state_dict": state_dict} if state_dict is not None else {}))
        else:  # transformers writes nothing on ranks > 0; an FSDP model's class is FSDP<Arch>: write it plainly
            _write_plain(model, out, state_dict)
        save_tokenizer(self.tokenizer, out)
        return out


def quiet_transformers() -> None:
    """No tqdm bars from transformers ("Loading weights", "Writing model shards"): they garble codechat's own
    output and progress display."""
    from transformers.utils import logging as hf_logging  # transformers: heavy, loaded on use (CLI start-up)

    hf_logging.disable_progress_bar()


def _rank() -> int:
    import torch.distributed as tdist  # torch: heavy, loaded on use (CLI start-up)
    return tdist.get_rank() if tdist.is_available() and tdist.is_initialized() else 0


def _write_plain(model, out: Path, state_dict: dict | None) -> None:
    """config.json, generation_config.json and model.safetensors, as save_pretrained writes them for the
    Llama-family models codechat trains (parameters only; tied weights once). `state_dict` or, when None, the
    model's parameters as they are now (under fsdp.full_weights: whole)."""
    import torch  # torch: heavy, loaded on use (CLI start-up)
    from safetensors.torch import save_file  # see above

    if state_dict is None:
        if fsdp.sharded_now(model):
            raise CodechatError("saving a sharded model: gather it first (codechat.policy.fsdp.full_weights "
                                "or full_state_dict)")
        state_dict = dict(model.named_parameters())  # tied weights appear once
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items() if isinstance(v, torch.Tensor)}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(model.config)
    config.architectures = [next(c.__name__ for c in type(model).__mro__ if not c.__name__.startswith("FSDP"))]
    config.save_pretrained(out)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)


def resolve_path(path: str) -> Path:
    """Preset name -> cached build; a run directory -> its final checkpoint (codechat/io/rundir.py); otherwise a
    local directory that must exist."""
    path = resolve_model(path)

    if path in PRESET_NAMES and not Path(path).exists():
        return preset_dir(path)
    p = Path(path).expanduser()
    if not p.exists():
        raise CodechatError(f"{path}: no such model directory (and not a preset: {', '.join(PRESET_NAMES)})")
    if not p.is_dir():
        raise CodechatError(f"{path}: not a directory; expected a Hugging Face model directory")
    cfg = p / "config.json"
    if is_adapter_dir(p):  # LoRA adapters: load_policy finds their base in adapter_config.json
        return p
    if not cfg.is_file():
        raise CodechatError(f"{path}: not a model directory (no config.json)")
    try:
        arch = json.loads(cfg.read_text()).get("architectures") or []
    except (OSError, ValueError) as e:
        raise CodechatError(f"{path}: unreadable config.json ({e})") from None
    if arch and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in arch):
        raise CodechatError(f"{path}: not a causal LM (architectures: {', '.join(arch)})")
    return p


def pick_device(name: str):
    import torch  # torch: heavy, loaded on use (CLI start-up)

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise CodechatError(f"device '{name}': CUDA is not available on this machine")
    try:
        return torch.device(name)
    except RuntimeError:
        raise CodechatError(f"device '{name}': expected auto, cpu or cuda[:N]") from None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "tiktoken.model")
"""Files one of which holds a tokenizer's vocabulary (transformers builds an empty one from config.json alone)."""


def load_tokenizer(path: Path, label: str):
    from transformers import AutoTokenizer  # transformers: heavy, loaded on use (CLI start-up)

    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise CodechatError(f"{label}: the model directory has no tokenizer (none of {', '.join(TOKENIZER_FILES[:3])}"
                            f"); copy the tokenizer files of the model it came from into it")
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError) as e:
        raise CodechatError(f"{label}: no usable tokenizer in the directory ({' '.join(str(e).split())[:200]})") \
            from None
    added = len(tok.get_added_vocab())
    if len(tok) - added < 2:  # special tokens only: every text would encode to nothing
        raise CodechatError(f"{label}: the tokenizer has no vocabulary ({len(tok) - added} tokens besides its {added} "
                            f"special ones); copy the tokenizer files of the model it came from into the directory")
    if tok.pad_token_id is None:
        if tok.eos_token_id is None:
            raise CodechatError(f"{label}: tokenizer has neither a pad nor an eos token; set pad_token")
        log.warning("%s: tokenizer has no pad token; using eos (%r) as pad", label, tok.eos_token)
        tok.pad_token = tok.eos_token
    return tok


def load_policy(cfg: ModelConfig, adapters: str | Path | None = None) -> Policy:
    """Load model + tokenizer from `cfg.path` (preset or local dir), in eval mode, on `cfg.device`. A LoRA
    adapter directory (as `cfg.path`, or `adapters` over the base `cfg.path`: a resumed LoRA run) is loaded
    over its base: trainable adapters when cfg.lora_r > 0, else merged (policy/lora.py)."""
    import torch  # torch and transformers: heavy, loaded on use (CLI start-up)
    from transformers import AutoModelForCausalLM  # see above

    if cfg.dtype not in DTYPES:
        raise CodechatError(f"dtype '{cfg.dtype}': expected one of {', '.join(DTYPES)}")
    quiet_transformers()
    path = resolve_path(cfg.path)
    if adapters is None and is_adapter_dir(path):
        adapters, path = path, resolve_path(adapter_base(path))
    device = pick_device(cfg.device)
    bound_kernel_caches(cfg.compute_dtype, device, getattr(torch, cfg.dtype))  # before any oneDNN op (precision.py)
    tok = load_tokenizer(Path(adapters) if adapters is not None else path, cfg.path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, cfg.dtype), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise CodechatError(f"{cfg.path}: cannot load the model ({str(e).splitlines()[0]})") from None
    model.to(device).eval()
    if cfg.grad_checkpointing:  # transformers' forward and fastlm.py's both read the flag this sets
        on = getattr(model, "activation_checkpointing_enable", None)  # transformers 5; the older name before
        if on is not None:
            on(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    eos = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos |= set(gen_eos if isinstance(gen_eos, (list, tuple)) else [] if gen_eos is None else [gen_eos])
    if adapters is not None:
        model = load_adapters(model, Path(adapters), trainable=cfg.lora_r > 0)
    elif cfg.lora_r > 0:
        model = add_lora(model, cfg)
    return Policy(model=model, tokenizer=tok, device=device, config=cfg, eos_token_ids=tuple(sorted(eos)),
                  base_path=str(Path(path).resolve()))
