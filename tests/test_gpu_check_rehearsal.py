"""bench/gpu_check.py on a machine without a GPU: the one-line skip, and its Qwen rehearsal part run on CPU."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qwen_helpers import qwen_dir

ROOT = Path(__file__).resolve().parents[1]


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the script runs its checks")
def test_gpu_check_without_cuda_prints_one_skip_line_and_exits_0():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py")], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == "gpu_check skipped: no CUDA", r.stdout + r.stderr
    assert json.loads(lines[-1]) == {"skipped": "no CUDA"}


@pytest.mark.slow
def test_gpu_check_rehearsal_part_on_cpu():
    """GRPO steps of configs/qwen-rehearsal.yaml and the sampler, on the cached 2 x 64 Qwen build: the figures a
    lent GPU prints (memory, step time, the sampler-trainer log-prob gap)."""
    qwen_dir("qwen2.5")  # skips without the extra; builds the cached model once
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = load_gpu_check().check_rehearsal("cpu", steps=1)
    finally:
        torch.set_num_threads(n)
    assert out["ok"] and out["grpo_steps"] == 1 and out["sampler_tok_s"] > 0, out
    assert out["peak_mem_mb"] > 0 and out["update_s"] > 0 and 0 <= out["logp_gap_max"] < 0.5, out


@pytest.mark.slow
def test_gpu_check_configs_part_on_cpu():
    """The real-checkpoint configs' first step (configs/qwen-coder-0.5b.yaml with its algorithm and precision
    settings; small sizes on CPU) on the cached Qwen build instead of the checkpoint."""
    path = qwen_dir("qwen2.5")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = load_gpu_check().check_configs("cpu", str(path), steps=1)
    finally:
        torch.set_num_threads(n)
    fig = out["qwen-coder-0.5b.yaml"]
    assert out["ok"] and fig["steps"] == 1 and fig["peak_mem_mb"] > 0 and "probe_kl" in fig, out
