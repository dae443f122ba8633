"""Read, override, validate and save configs: YAML file + `key.sub=value` overrides -> a typed RunConfig.

Unknown keys and values of the wrong type fail with one line naming the key and the valid choices; so do values
YAML cannot read (nested too deeply, a bad date, an integer of over 4,300 digits), numbers too large for their
type, NaN and infinity, and counts below their range (RANGES). Fuzzed: tests/test_config_fuzz.py.
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
import warnings
from pathlib import Path
from typing import Any

import yaml

from codechat import CodechatError, plugins
from codechat.algos import check_config
from codechat.config import RewardConfig, RunConfig
from codechat.config.rollout import COMPUTE_DTYPES
from codechat.config.checks import registered_checks
from codechat.rollout.rewards import check_components
from codechat.rollout.thinking import check_thinking
from codechat.verifier.answer_equiv import check_config as check_answer_config


class ConfigError(CodechatError):
    """A config file, key or value is invalid."""


def _shown(value: Any) -> str:
    """repr of a value for an error line, cut to 80 characters."""
    r = repr(value)
    return r if len(r) <= 80 else r[:60] + f"... ({len(r)} characters)"


def _yaml(text: str, key: str) -> Any:
    """`text` parsed as YAML, or `text` itself when it is not YAML; too deep to parse is a ConfigError."""
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):  # bad dates, 4,300+ digit ints, !!float abc
        return text
    except RecursionError:
        raise ConfigError(f"{key}: value nested too deeply ({len(text)} characters)") from None


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} fields, got {_shown(value)}")
        return _build(tp, value, key + ".")
    if origin is list:
        (inner,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()] if not value.startswith("[") else _yaml(value, key)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {_shown(value)}")
        return [_coerce(v, inner, key) for v in value]
    if origin is dict:
        if isinstance(value, str):
            value = _yaml(value, key)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {_shown(value)}")
        _, vt = typing.get_args(tp) or (Any, Any)
        return {str(k): _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {_shown(value)}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        what = "an integer" if tp is int else "a number"
        try:
            out = tp(value) if not isinstance(value, str) else tp(float(value) if tp is float else int(value))
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected {what}, got {_shown(value)}") from None
        except OverflowError:  # an int of hundreds of digits as a float, or an infinite float as an int
            raise ConfigError(f"{key}: expected {what}, got one too large ({_shown(value)})") from None
        if tp is int and isinstance(value, float) and value != int(value):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if tp is float and not math.isfinite(out):
            raise ConfigError(f"{key}: expected a finite number, got {_shown(value)}")
        return out
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {_shown(value)}")
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
        value = _yaml(raw, key.strip()) if raw != "" else ""
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
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: invalid YAML: {str(e).splitlines()[0]}") from None
        except (ValueError, TypeError, OverflowError) as e:  # a bad date, a 4,300+ digit int, not UTF-8
            raise ConfigError(f"{p}: unreadable value: {str(e).splitlines()[0][:200]}") from None
        except RecursionError:
            raise ConfigError(f"{p}: invalid YAML: nested too deeply") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
    data = apply_overrides(data, overrides or [])
    _renamed_autocast(data)
    rewards = data.get("rewards")
    if isinstance(rewards, dict) and rewards and not set(rewards) & {f.name for f in dataclasses.fields(RewardConfig)}:
        data["rewards"] = {"components": rewards}  # the short form: a mapping of component -> weight
    cfg = _build(RunConfig, data)
    # a run dir's config.yaml finds its plugins in RUN/plugins/ first (the copies the run started with)
    search = [Path(path).parent / "plugins"] if path and Path(path).name == "config.yaml" else []
    plugins.register_rewards(cfg.rewards.components, search)
    if cfg.data.loader:
        try:
            plugins.load_object(cfg.data.loader, search)
        except CodechatError as e:
            raise ConfigError(f"data.loader: {e}") from None
    validate(cfg)
    return cfg


def _renamed_autocast(data: dict) -> None:
    """`rl.autocast_bf16: true` (the update's forwards only) is now `model.compute_dtype: bfloat16` (every
    forward): an old config or run directory still loads, the setting carried over with a warning."""
    rl = data.get("rl")
    if not isinstance(rl, dict) or "autocast_bf16" not in rl:
        return
    on = _coerce(rl.pop("autocast_bf16"), bool, "rl.autocast_bf16")
    if on:
        model = data.setdefault("model", {})
        if isinstance(model, dict):
            model.setdefault("compute_dtype", "bfloat16")
        warnings.warn("rl.autocast_bf16 is now model.compute_dtype=bfloat16 (every forward in bf16 autocast over "
                      "the model.dtype weights); set that instead")


def validate(cfg: RunConfig) -> None:
    """Checks that types alone cannot express: those registered by the code the settings belong to (the stages
    and their settings, train/stages.py), then the rest."""
    problems = [p for check in registered_checks() for p in check(cfg)]
    if problems:
        raise ConfigError(_with_key(problems[0], cfg))
    if "sft" in cfg.stages and cfg.sft.warmup >= cfg.sft.steps > 0:  # legal, but rarely what was meant
        warnings.warn(f"sft.warmup: {cfg.sft.warmup} warmup steps in sft.steps={cfg.sft.steps}: the learning rate "
                      f"reaches sft.lr={cfg.sft.lr:g} only at the last step, if at all (set sft.warmup below "
                      f"sft.steps)", stacklevel=2)
    s, o, m, d = cfg.sampling, cfg.optim, cfg.model, cfg.dist
    checks = [
        ("sampling.temperature: expected >= 0", s.temperature >= 0), ("sampling.top_p: expected in (0, 1]", 0 < s.top_p <= 1),
        ("sampling.max_new_tokens: expected >= 1", s.max_new_tokens > 0),
        ("algo.kl_beta: expected >= 0", cfg.algo.kl_beta >= 0),
        ("checkpoint.keep_last: expected >= 1", cfg.checkpoint.keep_last >= 1),
        ("model.dtype: expected float32, bfloat16 or float16", m.dtype in ("float32", "bfloat16", "float16")),
        ("model.compute_dtype: expected float32 or bfloat16 (or empty: the weights' dtype)",
         m.compute_dtype in COMPUTE_DTYPES),
        ("model.lora_targets: expected all-linear or module names (at least one)",
         bool(m.lora_targets) and all(isinstance(t, str) and t for t in m.lora_targets)),
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
        raise ConfigError(_with_key(str(e).strip("'\""), cfg)) from None
    try:
        check_thinking(cfg)
    except CodechatError as e:
        raise ConfigError(_with_key(str(e), cfg)) from None
    try:
        check_answer_config(cfg.verifier.answer)
    except CodechatError as e:
        raise ConfigError(_with_key(str(e), cfg)) from None


def _one_line(msg: str) -> str:
    """msg with its unprintable characters escaped: a value quoted in a message (`rl.zero_variance=$'\\n'`) keeps
    the error one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in msg)


def _with_key(msg: str, cfg: RunConfig) -> str:
    """A check's message, one line, led by the key whose value it quotes when it names none ("unknown KL estimator
    'k9'; valid: ..." -> "algo.kl_estimator: unknown ..."), so every config error names its key."""
    return _one_line(_keyed(msg, cfg))


def _keyed(msg: str, cfg: RunConfig) -> str:
    sections = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    defaults = RunConfig()
    keys = [f"{s}.{f.name}" for s, obj in sections.items() if dataclasses.is_dataclass(obj)
            for f in dataclasses.fields(obj)] + [s for s, obj in sections.items() if not dataclasses.is_dataclass(obj)]
    if any(k in msg for k in keys):
        return msg
    for key in keys:  # a value set away from its default, quoted in the message
        section, _, name = key.partition(".")
        value = getattr(sections[section], name) if name else sections[section]
        default = getattr(getattr(defaults, section), name) if name else getattr(defaults, section)
        shown = list(value) if isinstance(value, (list, dict)) else [value]
        if value != default and any(isinstance(v, str) and (f"'{v}'" in msg or repr(v) in msg) for v in shown):
            return f"{key}: {msg}"
    return msg


RANGES: dict[str, tuple[float, bool]] = {
    "model.lora_r": (0, False), "model.lora_alpha": (0, True), "sampling.top_k": (0, False),
    "eval.every": (0, False), "eval.temperature": (0, False), "eval.regression_margin": (0, False),
    "checkpoint.every": (0, False), "log.audit_top_k": (0, False), "dist.timeout_s": (0, True),
    "data.max_eval_tasks": (0, False), "data.max_prompt_tokens": (0, False),
    "rewards.overlong_buffer": (0, False), "rewards.length_budget": (0, False), "rewards.length_per_token": (0, False),
    "verifier.memory_mb": (64, False), "verifier.max_output_bytes": (0, True), "verifier.nproc": (0, True),
    "verifier.nofile": (0, True), "verifier.fsize_mb": (0, False), "verifier.max_result_mb": (0, True),
    "verifier.total_timeout_s": (0, False), "verifier.ray_grace_s": (0, False),
    "agent.turn_tokens": (0, True), "agent.max_live": (0, True), "agent.tool_workers": (0, True),
    "agent.tool_output_chars": (0, False), "agent.run_timeout_s": (0, True),
    "rollout.vllm_max_model_len": (0, False), "rollout.vllm_kv_cache_gib": (0, False),
    "rollout.vllm_gpu_memory_utilization": (0, True),
}
"""Key -> (bound, strict): the value must be > bound (strict) or >= bound. Counts, sizes and limits that a
negative value (or zero, where strict) would turn into a crash, a hang or a silently different meaning; the
stage sections are checked by train/stages.py."""


def check_ranges(cfg: RunConfig) -> None:
    """Values that would hang the verifier, crash late or evaluate nothing: refused with the allowed range."""
    for key, (bound, strict) in RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value < bound or strict and value == bound:
            raise ConfigError(f"{key}: expected {'>' if strict else '>='} {bound}, got {value!r}")
    if cfg.rollout.vllm_gpu_memory_utilization > 1:
        raise ConfigError(f"rollout.vllm_gpu_memory_utilization: expected at most 1 (a share of GPU memory), got "
                          f"{cfg.rollout.vllm_gpu_memory_utilization!r}")
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
