"""Built-in presets: small Llama-architecture models with their own tokenizer, created locally, no download.

`build_preset("tiny", out_dir)` trains the byte-level BPE of `tokenizer.py` on the local corpus, builds a randomly
initialised `LlamaForCausalLM` (tied embeddings, RoPE, SwiGLU, RMSNorm) and saves a standard Hugging Face
directory: config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
chat_template.jinja. transformers, vLLM and codechat load it like any other checkpoint.

`preset_dir(name)` builds once into the cache `~/.cache/codechat/presets/<name>-<hash>` (or `$CODECHAT_CACHE/
presets/...`); the hash covers the preset's settings, the seed and the corpus, so changing any of them builds
anew. Building `tiny` takes ~2 s; `small` ~5 s.

The Qwen families (`qwen2.5`, `qwen3`: Qwen's vocabulary and chat format, random weights; policy/qwen.py) are
built the same way and cached under the same scheme (the hash covers the sizes, the seed and the vocabulary file).

    python -m codechat model create tiny --out /tmp/tiny
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from codechat import CodechatError
from codechat.policy.qwen import FAMILIES, check_sizes, qwen_model, qwen_tokenizer, ranks_hash
from codechat.policy.tokenizer import IM_END, corpus_hash, corpus_texts, train_tokenizer


@dataclass(frozen=True)
class Preset:
    vocab_size: int
    """BPE vocabulary size, special tokens included."""
    hidden_size: int
    """Width of the residual stream."""
    num_layers: int
    """Decoder layers."""
    num_heads: int
    """Query heads (head_dim = hidden_size / num_heads)."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention when fewer than num_heads)."""
    intermediate_size: int
    """SwiGLU hidden width."""
    max_positions: int
    """Longest sequence (prompt + completion) the model is meant for."""
    corpus_bytes: int = 2_000_000
    """Bytes of local code the tokenizer is trained on."""


PRESETS: dict[str, Preset] = {
    # ~2.8M parameters: trains from scratch on 2 CPU cores in minutes (the CPU demo).
    "tiny": Preset(vocab_size=4096, hidden_size=192, num_layers=4, num_heads=3, num_kv_heads=3,
                   intermediate_size=512, max_positions=1024),
    # ~28M parameters.
    "small": Preset(vocab_size=8192, hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                    intermediate_size=1408, max_positions=2048, corpus_bytes=4_000_000),
    # tiny with a 2,048-token context: a whole read-test-write-test-submit episode fits (the agent demo).
    "tiny-agent": Preset(vocab_size=4096, hidden_size=192, num_layers=4, num_heads=3, num_kv_heads=3,
                         intermediate_size=512, max_positions=2048),
}


QWEN_SIZES = {"layers": 2, "hidden": 64, "max_positions": 2048, "head_dim": 16}
"""Default size of the Qwen-shaped models (policy/qwen.py): trains on a CPU; the embedding is most of it."""

PRESET_NAMES = (*PRESETS, *FAMILIES)
"""Every name `model.path` and `codechat model create` accept: the Llama presets, then the Qwen families."""


def _get(name: str) -> Preset:
    if name not in PRESETS:
        raise CodechatError(f"unknown preset '{name}' (valid: {', '.join(PRESET_NAMES)})")
    return PRESETS[name]


def cache_root() -> Path:
    """`$CODECHAT_CACHE` or `~/.cache/codechat`."""
    return Path(os.environ.get("CODECHAT_CACHE") or Path.home() / ".cache" / "codechat")


def build_preset(name: str, out_dir, seed: int = 0, corpus: list[str] | None = None,
                 **overrides) -> Path:
    """Build preset `name` (with optional field overrides, e.g. num_layers=2; for a Qwen family: layers,
    hidden, max_positions, head_dim) into `out_dir`; returns it."""
    import torch  # torch and transformers: heavy, loaded only when a preset is built (CLI start-up)

    if name in FAMILIES:
        return build_qwen(name, out_dir, seed, **overrides)
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # see above

    p = Preset(**{**asdict(_get(name)), **overrides})
    texts = corpus_texts(p.corpus_bytes) if corpus is None else corpus
    tok = train_tokenizer(texts, p.vocab_size)
    im_end = tok.convert_tokens_to_ids(IM_END)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_layers, num_attention_heads=p.num_heads, num_key_value_heads=p.num_kv_heads,
        max_position_embeddings=p.max_positions, rms_norm_eps=1e-5, tie_word_embeddings=True,
        initializer_range=0.02, bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.eos_token_id, im_end], pad_token_id=tok.pad_token_id, do_sample=True,
        temperature=1.0, top_p=1.0, top_k=0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    save_tokenizer(tok, out)
    (out / "codechat_preset.json").write_text(json.dumps({"preset": name, "seed": seed, **asdict(p)}, indent=1))
    return out


def build_qwen(name: str, out_dir, seed: int = 0, **sizes) -> Path:
    """A Qwen-shaped model (policy/qwen.py) of QWEN_SIZES overridden by `sizes`, saved in HF format."""
    unknown = set(sizes) - set(QWEN_SIZES)
    if unknown:
        raise CodechatError(f"{name}: unknown size {', '.join(sorted(unknown))} (valid: {', '.join(QWEN_SIZES)})")
    from transformers.utils import logging as hf_logging  # transformers loads only when a model is built

    s = {**QWEN_SIZES, **sizes}
    check_sizes(s["layers"], s["hidden"], s["head_dim"])
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in codechat's output
    tok = qwen_tokenizer(name)
    model = qwen_model(name, tok, s["layers"], s["hidden"], s["max_positions"], seed, s["head_dim"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    save_tokenizer(tok, out)
    (out / "codechat_preset.json").write_text(json.dumps({"preset": name, "seed": seed, **s}, indent=1))
    return out


def save_tokenizer(tok, out: Path) -> None:
    """save_pretrained, then name the class `PreTrainedTokenizerFast` so transformers 4.x (vLLM) loads it too."""
    tok.save_pretrained(out)
    cfg_path = Path(out) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("tokenizer_class") == "TokenizersBackend":
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if isinstance(cfg.get("extra_special_tokens"), list):
        cfg["additional_special_tokens"] = cfg.pop("extra_special_tokens")
    cfg_path.write_text(json.dumps(cfg, indent=2))


@functools.lru_cache(maxsize=None)  # the corpus is fixed for a process's life; hashing it costs ~0.5 s
def preset_key(name: str, seed: int = 0) -> str:
    if name in FAMILIES:
        blob = json.dumps({"family": name, "sizes": QWEN_SIZES, "seed": seed, "ranks": ranks_hash(),
                           "version": 1}, sort_keys=True)
        return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"
    p = _get(name)
    blob = json.dumps({"preset": asdict(p), "seed": seed, "corpus": corpus_hash(corpus_texts(p.corpus_bytes)),
                       "version": 1}, sort_keys=True)
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def preset_dir(name: str, seed: int = 0) -> Path:
    """The cached build of preset `name`, building it first when missing (atomic rename, safe to race)."""
    out = cache_root() / "presets" / preset_key(name, seed)
    if (out / "model.safetensors").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out.parent))
    try:
        build_preset(name, tmp, seed=seed)
        try:
            tmp.rename(out)
        except OSError:  # another process finished first
            if not (out / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
