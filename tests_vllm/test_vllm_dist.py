"""`rollout.engine: vllm` under torchrun on 2 CPU ranks (gloo), one engine per rank: with `dist.parallel=ddp` and
`fsdp` (the weights pushed into vLLM are gathered from the shards), GRPO steps that change the weights draw the
same samples and end at the same weights. Run by `make test-vllm` in .venv-vllm."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the vllm venv: make test-vllm")

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_vllm_rollouts_ddp_and_fsdp_agree(tmp_path):
    from safetensors.torch import load_file

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun not found beside the Python interpreter")
    # stop strings + a length reward: unequal lengths, nonzero advantages, so step 2 samples from pushed weights
    args = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "sampling.stop=[e]", "log.progress=false",
            "log.plot=false", "verifier.workers=1", "rl.prompts_per_step=2", "rl.group_size=2", "rl.steps=2",
            "rl.lr=1e-3", "checkpoint.every=0", "stages=[grpo]", "dist.backend=gloo", "rollout.engine=vllm",
            "rollout.vllm_kv_cache_gib=0.0625", "algo.kl_beta=0.04", "rewards.components={pass-all: 1.0, length: 1.0}",
            "rewards.length_budget=2", "rewards.length_per_token=0.1"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    runs = {m: tmp_path / m for m in ("ddp", "fsdp")}
    for mode, run in runs.items():
        cmd = [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), "-m", "codechat", "train",
               *args, f"dist.parallel={mode}", f"run_dir={run}"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        assert "Traceback" not in p.stderr, p.stderr[-4000:]  # incl. vLLM's shutdown at exit
    a, b = (load_file(r / "checkpoints" / "step-0000002" / "model" / "model.safetensors") for r in runs.values())
    from codechat.policy import preset_dir
    start = load_file(preset_dir("tiny") / "model.safetensors")
    moved = max((a[k] - start[k]).abs().max().item() for k in a)
    rollouts = {m: (r / "rollouts.jsonl").read_text() for m, r in runs.items()}
    assert rollouts["ddp"] == rollouts["fsdp"] and rollouts["ddp"].count("\n") == 8
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-4 and diff < 0.05 * moved, (moved, diff)
