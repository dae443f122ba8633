"""The memory estimate `--dry-run` prints (train/memory.py): each setting moves the term it should, and the dry run
of a config prints it beside the measured peak."""
import pytest
import torch

from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.train.dryrun import dry_run
from codechat.train.memory import estimate


def est(overrides):
    cfg = load_config(None, ["model.device=cpu", "stages=[grpo]", *overrides])
    return estimate(cfg, load_policy(cfg.model).model, prompt_tokens=40, samples=16)


def test_each_setting_moves_its_term():
    base = est(["algo.kl_beta=0.04", "rl.micro_batch_tokens=0"])
    n = sum(p.numel() for p in load_policy(load_config(None, ["model.device=cpu"]).model).model.parameters())
    assert base.weights == base.gradients == base.reference == 4 * n and base.adamw == 8 * n
    assert base.autocast_copies == 0 and base.total > base.weights
    assert est(["algo.kl_beta=0"]).reference == 0
    assert est(["algo.kl_beta=0.04", "rl.micro_batch_tokens=0", "model.grad_checkpointing=true"]).activations < \
        base.activations
    assert est(["algo.kl_beta=0.04", "rl.micro_batch_tokens=0", "rl.grad_accum=4"]).activations < base.activations
    # 16 rows of up to 64 new tokens: 1,024 tokens, one micro-batch of 16; a budget of 256 makes it 4 of 4
    short = ["algo.kl_beta=0.04", "sampling.max_new_tokens=64"]
    assert est(short).activations == est([*short, "rl.micro_batch_tokens=0"]).activations
    assert est([*short, "rl.micro_batch_tokens=256"]).activations == \
        est([*short, "rl.micro_batch_tokens=0", "rl.grad_accum=4"]).activations
    mixed = est(["algo.kl_beta=0.04", "model.compute_dtype=bfloat16"])
    assert mixed.autocast_copies == 2 * n and mixed.weights == base.weights and mixed.kv_cache < base.kv_cache
    pytest.importorskip("peft")
    lora = est(["algo.kl_beta=0.04", "model.lora_r=4"])
    assert lora.reference == 0 and lora.gradients < base.gradients / 10 and lora.weights > base.weights


def test_dry_run_prints_the_estimate_beside_the_measured_peak(capsys):
    cfg = load_config(None, ["model.device=cpu", "stages=[grpo]", "data.train=builtin:toy", "rl.prompts_per_step=2",
                             "rl.group_size=2", "sampling.max_new_tokens=8", "verifier.workers=1",
                             "model.compute_dtype=bfloat16"])
    rep = dry_run(cfg)
    lines = rep.lines()
    assert rep.peak_mem_mb > 0 and rep.estimate is not None and rep.estimate.total > 0
    assert any(line.startswith("estimate for this model and batch:") and "autocast copies" in line for line in lines)
    assert not torch.is_autocast_enabled("cpu")  # the dry run left no autocast region open
