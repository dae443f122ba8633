"""`codechat model create|info|sample|export`: build a preset, describe or sample a model, export a run.

    codechat model create tiny --out runs/tiny          # Llama-architecture model + BPE tokenizer, HF format
    codechat model create qwen3 --out runs/q3 --layers 2 --hidden 64   # Qwen vocabulary + ChatML, random weights
    codechat model create qwen2.5 --out runs/q25 --head-dim 32         # head size 32: loads in vLLM on CPU
    codechat model info runs/tiny                       # architecture, parameters, vocabulary, special tokens
    codechat model sample tiny --prompt "def add(a, b):" -n 2 --max-new-tokens 40
    codechat model export runs/x --out exported/x       # clean HF dir: weights, tokenizer, template, card
"""
from __future__ import annotations

import argparse

from codechat import CodechatError
from codechat.config import ModelConfig, SamplingConfig
from codechat.export import export
from codechat.policy import Sampler, build_preset, load_policy
from codechat.policy.presets import PRESET_NAMES, PRESETS
from codechat.rollout.collect import prompt_text
from codechat.io.rundir import resolve_model, run_prompt_format
from codechat.tasks import Task


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="build a preset into a directory in Hugging Face format")
    c.add_argument("preset", help=f"preset name: {', '.join(PRESET_NAMES)} (qwen2.5/qwen3: Qwen's vocabulary and "
                   "chat format, random weights; needs 'codechat[qwen]')")
    c.add_argument("--out", required=True, help="output directory")
    c.add_argument("--seed", type=int, default=0, help="weight-initialisation seed (default 0)")
    c.add_argument("--layers", type=int, help="decoder layers (default: the preset's; qwen 2)")
    c.add_argument("--hidden", type=int, help="hidden size (default: the preset's; qwen 64)")
    c.add_argument("--head-dim", type=int, help="qwen only: attention head size, a multiple of 8 dividing --hidden "
                   "(default 16; 32 or more for vLLM's CPU attention)")
    i = sub.add_parser("info", help="describe a model directory or preset")
    i.add_argument("path", help="model directory or preset name")
    e = sub.add_parser("export", help="write a run's checkpoint as a clean Hugging Face model directory")
    e.add_argument("path", help="run directory (RUN, RUN/final, RUN/best) or model directory")
    e.add_argument("--out", required=True, help="new (or empty) output directory")
    e.add_argument("--checkpoint", default="final", choices=["final", "best"],
                   help="which checkpoint of a run directory (default final)")
    s = sub.add_parser("sample", help="sample completions of a prompt")
    s.add_argument("path", help="model directory or preset name")
    s.add_argument("--prompt", required=True, help="prompt text")
    s.add_argument("-n", type=int, default=1, help="samples (default 1)")
    s.add_argument("--max-new-tokens", type=int, default=64)
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template (a run directory "
                   "uses the format it trained with: its model.chat, the prompt posed as a task)")
    s.add_argument("--checkpoint", default="final", choices=["final", "best"],
                   help="which checkpoint of a run directory (default final)")
    s.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def describe(policy) -> str:
    m, tok = policy.model, policy.tokenizer
    cfg = m.config
    n = sum(p.numel() for p in m.parameters())
    lines = [
        f"architecture: {type(m).__name__} ({cfg.model_type})",
        f"parameters: {n / 1e6:.2f}M ({n})",
        f"layers: {cfg.num_hidden_layers}, hidden: {cfg.hidden_size}, heads: {cfg.num_attention_heads} "
        f"(kv {getattr(cfg, 'num_key_value_heads', cfg.num_attention_heads)}, size "
        f"{getattr(cfg, 'head_dim', None) or cfg.hidden_size // cfg.num_attention_heads}), "
        f"context: {getattr(cfg, 'max_position_embeddings', '?')}",
        f"vocabulary: {len(tok)}; eos: {tok.eos_token!r}; pad: {tok.pad_token!r}; stop ids: "
        f"{list(policy.eos_token_ids)}",
        f"chat template: {'yes' if getattr(tok, 'chat_template', None) else 'no'}",
        f"dtype: {m.dtype}; device: {policy.device}",
    ]
    return "\n".join(lines)


def size_overrides(args: argparse.Namespace) -> dict:
    """--layers/--hidden/--head-dim as build_preset's overrides (a Llama preset's hidden size must divide by its
    heads, and sets its head size)."""
    qwen = args.preset not in PRESETS
    out = {}
    if args.head_dim is not None:
        if not qwen:
            raise CodechatError(f"--head-dim: only the qwen2.5/qwen3 presets take it ({args.preset}'s head size is "
                                "--hidden / its heads)")
        out["head_dim"] = args.head_dim
    if args.layers is not None:
        if args.layers < 1:
            raise CodechatError(f"--layers {args.layers}: expected at least 1")
        out["layers" if qwen else "num_layers"] = args.layers
    if args.hidden is not None:
        heads = None if qwen else PRESETS[args.preset].num_heads
        if heads and (args.hidden < heads or args.hidden % heads):
            raise CodechatError(f"--hidden {args.hidden}: {args.preset} has {heads} heads; expected a multiple")
        out["hidden" if qwen else "hidden_size"] = args.hidden
    return out


def run(args: argparse.Namespace) -> int:
    if args.action == "create":
        if args.preset not in PRESET_NAMES:
            raise CodechatError(f"unknown preset '{args.preset}' (valid: {', '.join(PRESET_NAMES)})")
        out = build_preset(args.preset, args.out, seed=args.seed, **size_overrides(args))
        print(f"wrote {args.preset} to {out}")
        print(describe(load_policy(ModelConfig(path=str(out), device="cpu"))))
        return 0
    if args.action == "export":
        out = export(args.path, args.out, args.checkpoint)
        print(f"exported {args.path} to {out} (weights, tokenizer, chat template, generation config, README.md)")
        return 0
    if args.action == "info":
        print(describe(load_policy(ModelConfig(path=resolve_model(args.path), device="cpu"))))
        return 0
    path = resolve_model(args.path, args.checkpoint)
    trained = run_prompt_format(path)  # a run's model: pose the prompt exactly as training posed tasks
    policy = load_policy(ModelConfig(path=path, chat=args.chat or trained == "chat"))
    prompt = prompt_text(Task("prompt", args.prompt, [])) if trained else args.prompt
    cfg = SamplingConfig(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                         stop=args.stop, seed=args.seed)
    batch = Sampler(policy).sample([policy.encode_prompt(prompt)], args.n, cfg)
    for i, text in enumerate(batch.texts):
        print(f"--- sample {i} ({batch.finish_reason[i]}, {int(batch.n_tokens[i])} tokens)")
        print(text)
    return 0
