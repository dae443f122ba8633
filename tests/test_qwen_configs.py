"""The real-checkpoint Qwen config is the CPU rehearsal's run: only the model path, data paths, run dir and sizes
differ; and it is a run that does not damage the instruct model: no SFT, fp32 masters, an RL learning rate."""
from pathlib import Path

from codechat.config.io import load_config, to_dict

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SIZES = {"run_dir", "model.path", "data.train", "data.eval", "data.max_eval_tasks", "sampling.max_new_tokens",
         "rl.steps", "rl.prompts_per_step", "rl.group_size", "rl.grad_accum", "rl.probe_every", "eval.every", "eval.n",
         "eval.k"}


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


def test_the_gpu_config_keeps_the_instruct_model_intact():
    gpu = load_config(CONFIGS / "qwen-coder-0.5b.yaml")
    assert gpu.stages == ["grpo"]  # no SFT on a synthetic set
    assert gpu.model.dtype == "float32" and gpu.model.compute_dtype == "bfloat16"  # fp32 masters, bf16 compute
    assert gpu.rl.lr <= 1e-6 and gpu.algo.kl_beta > 0 and gpu.verifier.plus_inputs
    assert not gpu.data.train.startswith("builtin") and "Mbpp" in gpu.data.eval  # real data
