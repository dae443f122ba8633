"""Read, override, validate and save configs: YAML file + `key.sub=value` overrides -> a typed RunConfig.

Unknown keys and values of the wrong type fail with one line naming the key and the valid choices.
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from codechat import CodechatError, plugins
from codechat.algos import check_config
from codechat.config import RewardConfig, RunConfig
from codechat.rollout.rewards import check_components
from codechat.train.stages import check_stages
from codechat.rollout.thinking import check_thinking
from codechat.verifier.answer_equiv import check_config as check_answer_config


class ConfigError(CodechatError):
    """A config file, key or value is invalid."""


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return _build(tp, value, key + ".")
    if origin is list:
        (inner,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()] if not value.startswith("[") else yaml.safe_load(value)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, inner, key) for v in value]
    if origin is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        _, vt = typing.get_args(tp) or (Any, Any)
        return {str(k): _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            out = tp(value) if not isinstance(value, str) else tp(float(value) if tp is float else int(value))
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected {'an integer' if tp is int else 'a number'}, got {value!r}") from None
        if tp is int and isinstance(value, float) and value != int(value):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return out
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return "" if value is None else str(value)
    return value


def _build(cls: type, values: dict, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for k, v in values.items():
        if k not in names:
            raise ConfigError(f"unknown config key '{prefix}{k}' (valid: {', '.join(names)})")
        kwargs[k] = _coerce(v, hints[k], prefix + k)
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `a.b=value` strings (value parsed as YAML) to a nested dict."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}': expected key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}': '{p}' is not a section")
        node[parts[-1]] = value
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """YAML file (optional) + overrides -> validated RunConfig."""
    data: dict = {}
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: invalid YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
    data = apply_overrides(data, overrides or [])
    rewards = data.get("rewards")
    if isinstance(rewards, dict) and rewards and not set(rewards) & {f.name for f in dataclasses.fields(RewardConfig)}:
        data["rewards"] = {"components": rewards}  # the short form: a mapping of component -> weight
    cfg = _build(RunConfig, data)
    # a run dir's config.yaml finds its plugins in RUN/plugins/ first (the copies the run started with)
    search = [Path(path).parent / "plugins"] if path and Path(path).name == "config.yaml" else []
    plugins.register_rewards(cfg.rewards.components, search)
    if cfg.data.loader:
        plugins.load_object(cfg.data.loader, search)
    validate(cfg)
    return cfg


def validate(cfg: RunConfig) -> None:
    """Checks that types alone cannot express: the stages and their settings (train/stages.py), then the rest."""
    problems = check_stages(cfg)
    if problems:
        raise ConfigError(problems[0])
    s, o, m, d = cfg.sampling, cfg.optim, cfg.model, cfg.dist
    checks = [
        ("sampling.temperature: expected >= 0", s.temperature >= 0), ("sampling.top_p: expected in (0, 1]", 0 < s.top_p <= 1),
        ("sampling.max_new_tokens: expected >= 1", s.max_new_tokens > 0),
        ("algo.kl_beta: expected >= 0", cfg.algo.kl_beta >= 0),
        ("checkpoint.keep_last: expected >= 1", cfg.checkpoint.keep_last >= 1),
        ("model.dtype: expected float32, bfloat16 or float16", m.dtype in ("float32", "bfloat16", "float16")),
        ("rollout.engine: expected hf or vllm", cfg.rollout.engine in ("hf", "vllm")),
        ("dist.parallel: expected ddp or fsdp", d.parallel in ("ddp", "fsdp")),
        ("dist.backend: expected auto, nccl or gloo", d.backend in ("auto", "nccl", "gloo")),
        ("verifier.backend: expected local or ray", cfg.verifier.backend in ("local", "ray")),
        ("verifier.cache_size: expected >= 0 (0 = no cache across steps)", cfg.verifier.cache_size >= 0),
        ("optim.beta1: expected in [0, 1)", 0 <= o.beta1 < 1), ("optim.beta2: expected in [0, 1)", 0 <= o.beta2 < 1),
        ("optim.weight_decay: expected >= 0", o.weight_decay >= 0),
        ("optim.max_grad_norm: expected >= 0 (0 = no clipping)", o.max_grad_norm >= 0),
    ]
    for msg, ok in checks:
        if not ok:
            key = msg.split(":", 1)[0]
            section, name = key.split(".")
            raise ConfigError(f"{msg}, got {getattr(getattr(cfg, section), name)!r}")
    check_ranges(cfg)
    if cfg.dist.parallel == "fsdp" and cfg.model.lora_r > 0:
        raise ConfigError("dist.parallel=fsdp: not with LoRA (model.lora_r > 0); LoRA training fits one device, "
                          "use dist.parallel=ddp")
    try:
        check_config(cfg.algo)
        check_components(cfg.rewards.components)
    except (CodechatError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(str(e).strip("'\"")) from None
    try:
        check_thinking(cfg)
    except CodechatError as e:
        raise ConfigError(str(e)) from None
    try:
        check_answer_config(cfg.verifier.answer)
    except CodechatError as e:
        raise ConfigError(str(e)) from None


def check_ranges(cfg: RunConfig) -> None:
    """Values that would hang the verifier, crash late or evaluate nothing: refused with the allowed range."""
    v, e = cfg.verifier, cfg.eval
    if v.workers < 0:
        raise ConfigError(f"verifier.workers: expected >= 0 (0 = one per CPU core), got {v.workers}")
    if not (math.isfinite(v.timeout_s) and v.timeout_s > 0):
        raise ConfigError(f"verifier.timeout_s: expected a positive number of seconds, got {v.timeout_s}")
    if not (math.isfinite(v.test_timeout_s) and v.test_timeout_s >= 0):
        raise ConfigError(f"verifier.test_timeout_s: expected >= 0 seconds (0 = none), got {v.test_timeout_s}")
    if e.n < 1:
        raise ConfigError(f"eval.n: expected >= 1 (samples per task for pass@k), got {e.n}")
    bad = [k for k in e.k if not 1 <= k <= e.n]
    if bad or not e.k:
        raise ConfigError(f"eval.k: every k must be in 1..eval.n ({e.n}), got {e.k}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", cfg.model.device):
        raise ConfigError(f"model.device: expected auto, cpu, cuda or cuda:N, got '{cfg.model.device}'")


def save_config(cfg: RunConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
