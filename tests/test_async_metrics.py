"""Asynchronous-rollout metrics: the staleness histogram, queue depth, producer idle and trainer wait; the IS
ratio max; the sampler-trainer log-prob gap on the fixed probe batch (rl.probe_every), ~0 when the sampler holds
the trainer's weights, > 0 one step off policy, with a warning past rl.probe_warn_kl."""
import json
import math
import warnings

import pytest
import torch

from codechat import CodechatError
from codechat.algos.corrections import gap_metrics
from codechat.config.io import load_config
from codechat.train import train

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=12", "sampling.stop=[e]", "log.progress=false",
        "log.plot=false", "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=4", "checkpoint.every=0",
        "log.audit=false", "stages=[grpo]", "rl.steps=3", "rl.lr=1e-3", "algo.tis_cap=2",
        "rewards.components={pass-all: 1.0, length: 1.0}", "rewards.length_budget=4", "rewards.length_per_token=0.1"]


def steps(tmp_path, name, *extra):
    d = tmp_path / name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(load_config(None, BASE + [f"run_dir={d}", *extra]))
    mets = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    return [m for m in mets if "pass_rate" in m], [str(w.message) for w in caught]


def test_sync_probe_every_two_has_no_gap(tmp_path):
    m, warned = steps(tmp_path, "sync", "rl.probe_every=2", "rl.probe_prompts=2")
    assert ["probe/kl" in x for x in m] == [True, False, True]  # steps 0 and 2 (0-based) are due
    for x in m[::2]:  # the hf sampler holds the trainer's weights: only numerics apart
        assert abs(x["probe/kl"]) < 1e-4 and x["probe/max_abs"] < 1e-3 and x["probe/drift"] == 0.0
    assert not any("probe batch drifted" in w for w in warned)
    assert all("async/queue_depth" not in x for x in m)


def test_async_metrics_and_probe_drift_warning(tmp_path):
    m, warned = steps(tmp_path, "async", "rl.async_steps=1", "rl.probe_every=1", "rl.probe_warn_kl=1e-9")
    assert [x["async/lag_0"] for x in m] == [1.0, 0.5, pytest.approx(1 / 3)]  # share of samples so far per lag
    assert [x["async/lag_1"] for x in m] == [0.0, 0.5, pytest.approx(2 / 3)]
    for x in m:
        assert 0 <= x["async/queue_depth"] <= 1 and x["async/producer_idle_s"] >= 0 and x["async/wait_s"] >= 0
        assert x["tis_ratio_max"] >= x["tis_ratio_mean"] > 0
    assert abs(m[0]["probe/kl"]) < 1e-4  # batch 0: sampled with the starting weights, the trainer's
    moved = [s for s in (1, 2) if m[s - 1]["grad_norm"] > 0]  # behind by one update that moved the weights
    assert moved and all(m[s]["probe/max_abs"] > 1e-3 for s in moved)
    drifted = [s for s in range(3) if m[s]["probe/drift"] == 1.0]
    assert drifted and all(m[s]["probe/kl"] > 1e-9 for s in drifted)
    assert any("probe batch drifted" in w and "rl.probe_warn_kl" in w for w in warned)


def test_ratio_max_is_the_largest_unmasked_ratio():
    g = torch.Generator().manual_seed(0)
    gap, mask = torch.randn(5, 7, generator=g), (torch.rand(5, 7, generator=g) > 0.3).float()
    gap[mask == 0] = 50.0  # padding must never count
    ref = max(math.exp(gap[i, j]) for i in range(5) for j in range(7) if mask[i, j] > 0)
    assert gap_metrics(gap.masked_fill(mask == 0, 0.0), mask)["tis_ratio_max"] == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("over,needle", [(["rl.probe_every=-1"], "rl.probe_every must be >= 0"),
                                         (["rl.probe_every=1", "rl.probe_prompts=0"], "rl.probe_prompts"),
                                         (["rl.probe_every=1", "rl.probe_warn_kl=0"], "rl.probe_warn_kl")])
def test_probe_settings_refused_by_name(tmp_path, over, needle):
    with pytest.raises(CodechatError, match=needle):
        train(load_config(None, BASE + [f"run_dir={tmp_path / 'x'}", *over]))
