"""--resume with rl.async_steps > 0: the checkpoint saves the producer's batches in flight, so the resumed run
trains on the same batches (same samples, same policy versions) and ends with the same weights as the
uninterrupted run; where they cannot be restored (a changed async_steps) the producer restarts from the
checkpoint's data position with its weights: no prompt lost or repeated, versions counting on."""
import json
import shutil

import torch
from safetensors.torch import load_file

from codechat.config.io import load_config
from codechat.train import train
from codechat.train.checkpoint import Checkpointer

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=12", "sampling.stop=[e]", "log.progress=false",
        "log.plot=false", "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=4", "log.audit=false",
        "stages=[grpo]", "rl.steps=4", "rl.lr=1e-3", "algo.tis_cap=2", "checkpoint.every=1",
        "checkpoint.keep_last=10", "rewards.components={pass-all: 1.0, length: 1.0}", "rewards.length_budget=4",
        "rewards.length_per_token=0.1"]  # the length reward: a signal from the first step, so the weights move


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def halt_after(run, step):
    for d in sorted((run / "checkpoints").iterdir())[step:]:  # as if killed after `step` steps
        shutil.rmtree(d)


def test_async_resume_is_exact(tmp_path):
    args = ["rl.async_steps=2"]
    straight, halted = tmp_path / "straight", tmp_path / "halted"
    train(load_config(None, BASE + [f"run_dir={straight}", *args]))
    train(load_config(None, BASE + [f"run_dir={halted}", *args]))
    saved = Checkpointer.load_state(halted / "checkpoints" / "step-0000002")[1]["async_producer"]
    assert [(b["version"], b["step"], b["pos"]) for b in saved["batches"]] == [(0, 2, 4), (1, 3, 6)]  # k=2: batch 2 sampled before update 1
    halt_after(halted, 2)
    train(resume=halted)
    a = load_file(str(straight / "checkpoints" / "step-0000004" / "model" / "model.safetensors"))
    b = load_file(str(halted / "checkpoints" / "step-0000004" / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert lines(straight / "rollouts.jsonl") == lines(halted / "rollouts.jsonl")
    ms, mh = lines(straight / "metrics.jsonl"), lines(halted / "metrics.jsonl")
    assert [m["step"] for m in mh] == [1, 2, 3, 4]
    assert [m["async/staleness"] for m in mh] == [m["async/staleness"] for m in ms] == [0.0, 1.0, 2.0, 2.0]
    assert [m["pg_loss"] for m in mh] == [m["pg_loss"] for m in ms]
    assert any(m["grad_norm"] > 0 for m in ms[2:]), [m["grad_norm"] for m in ms]  # resumed updates moved weights


def test_async_resume_without_saved_batches_restarts_the_producer(tmp_path):
    run = tmp_path / "r"
    train(load_config(None, BASE + [f"run_dir={run}", "rl.async_steps=1"]))
    straight = [(r["step"], r["task_id"]) for r in lines(run / "rollouts.jsonl")]
    halt_after(run, 2)
    train(resume=run, overrides=["rl.async_steps=2"])  # saved for k=1: sampled again with the step-2 weights
    resumed = [(r["step"], r["task_id"]) for r in lines(run / "rollouts.jsonl")]
    assert resumed == straight  # the same prompts at the same steps: none lost, none repeated
    m = lines(run / "metrics.jsonl")
    assert [x["async/staleness"] for x in m] == [0.0, 1.0, 0.0, 1.0]  # fresh after the restart, then behind
    state = json.loads((run / "checkpoints" / "step-0000004" / "state.json").read_text())
    assert state["data_pos"] == 8 and state["samples"] == 4 * 2 * 4
