"""The real-checkpoint Qwen config is the CPU rehearsal's run: only the model path, dtype, run dir and sizes differ."""
from pathlib import Path

from codechat.config.io import load_config, to_dict

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SIZES = {"run_dir", "model.path", "model.dtype", "data.max_eval_tasks", "sampling.max_new_tokens", "sft.steps",
         "sft.batch_size", "sft.lr", "rl.steps", "rl.lr", "rl.prompts_per_step", "rl.group_size", "eval.every",
         "eval.n", "eval.k"}


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_the_gpu_config_differs_from_the_rehearsal_only_in_path_and_sizes():
    cpu = _flat(to_dict(load_config(CONFIGS / "qwen-rehearsal.yaml")))
    gpu = _flat(to_dict(load_config(CONFIGS / "qwen-coder-0.5b.yaml")))
    differ = {k for k in cpu.keys() | gpu.keys() if cpu.get(k) != gpu.get(k)}
    assert differ and differ <= SIZES, differ - SIZES
    assert cpu["model.chat"] is True and gpu["model.chat"] is True
