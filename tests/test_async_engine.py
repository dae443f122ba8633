"""rl.async_steps with an engine that holds its own weights (vLLM's kind): the producer thread loads each batch's
snapshot into the engine and samples with it, the trainer never pushes weights meanwhile, and the run equals the
one whose producer samples its own model copy (the hf engine). An engine of that kind stands in for vLLM here
(tests_vllm/test_vllm_async.py runs vLLM itself)."""
import copy
import dataclasses
import json
import threading

import pytest

from codechat.config.io import load_config
from codechat.policy import engine as engines
from codechat.policy.sampler import Sampler
from codechat.train import train
from codechat.train.producer import weights_snapshot

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=12", "sampling.stop=[e]", "log.progress=false",
        "log.plot=false", "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=4", "checkpoint.every=0",
        "log.audit=false", "stages=[grpo]", "rl.steps=3", "rl.lr=1e-3", "algo.tis_cap=2", "rl.async_steps=1",
        "rewards.components={pass-all: 1.0, length: 1.0}", "rewards.length_budget=4", "rewards.length_per_token=0.1"]


class OwnWeights:
    """A rollout engine with its own copy of the weights, as vLLM's: the built-in sampler over a model copy."""
    samples_training_weights = False
    calls: list[tuple[str, str]] = []  # (method, thread name)

    def __init__(self, policy, rollout, sampling):
        self.policy = dataclasses.replace(policy, model=copy.deepcopy(policy.model).eval())
        self.inner = Sampler(self.policy, max_rows=rollout.max_rows)

    def sample(self, *args, **kwargs):
        self.calls.append(("sample", threading.current_thread().name))
        return self.inner.sample(*args, **kwargs)

    def update_weights(self, model):
        self.calls.append(("update_weights", threading.current_thread().name))
        self.policy.model.load_state_dict(model.state_dict())

    def snapshot(self, model):
        return weights_snapshot(model)

    def load_snapshot(self, snap):
        self.calls.append(("load_snapshot", threading.current_thread().name))
        self.policy.model.load_state_dict(snap)

    def release_kv(self):
        self.inner.release_kv()

    def close(self):
        pass


def run(tmp_path, name, *extra):
    d = tmp_path / name
    train(load_config(None, BASE + [f"run_dir={d}", *extra]))
    rolls = [(r["step"], r["task_id"], r["completion"], r["reward"])
             for r in map(json.loads, (d / "rollouts.jsonl").read_text().splitlines())]
    mets = [m for m in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "pass_rate" in m]
    return rolls, mets


def test_the_producer_samples_with_an_own_weights_engine_as_with_its_own_copy(tmp_path, monkeypatch):
    copy_rolls, copy_m = run(tmp_path, "copy")  # rollout.engine=hf: the producer's own model copy
    monkeypatch.setitem(engines.ENGINES, "vllm", OwnWeights)
    OwnWeights.calls = []
    own_rolls, own_m = run(tmp_path, "own", "rollout.engine=vllm")
    assert own_rolls == copy_rolls  # the same samples, step by step, though the weights moved
    for k in ("loss", "pg_loss", "grad_norm", "async/staleness", "logp_gap_max"):
        assert [m[k] for m in own_m] == [m[k] for m in copy_m], k
    assert any(m["grad_norm"] > 0 for m in own_m) and [m["async/staleness"] for m in own_m] == [0.0, 1.0, 1.0]
    methods = [c[0] for c in OwnWeights.calls]
    assert "update_weights" not in methods  # the trainer thread never pushed: the producer loads snapshots
    assert methods.count("load_snapshot") == 3  # one per batch, each before its sampling
    assert all(t.startswith("rollout-producer") for _, t in OwnWeights.calls)  # only the producer thread used it
    assert methods[0] == "load_snapshot" and methods[1] == "sample"


def test_an_own_weights_engine_is_pushed_after_every_update_without_a_producer(tmp_path, monkeypatch):
    monkeypatch.setitem(engines.ENGINES, "vllm", OwnWeights)
    OwnWeights.calls = []
    run(tmp_path, "sync", "rollout.engine=vllm", "rl.async_steps=0")
    assert [c[0] for c in OwnWeights.calls].count("update_weights") == 3
    assert "load_snapshot" not in [c[0] for c in OwnWeights.calls]


@pytest.fixture(autouse=True)
def _no_engine_leak():
    yield
    OwnWeights.calls = []

