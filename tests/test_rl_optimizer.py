"""The RL stage's optimizer: a warm-up by default (a fresh AdamW's first steps are the largest), and the
embedding table's own learning rate (rl.embed_lr_scale)."""
import json

import pytest
import torch

from codechat.config import ModelConfig, OptimConfig
from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.train import rl, train
from codechat.train.common import make_optimizer

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=12", "log.progress=false", "log.plot=false",
        "verifier.workers=2", "rl.prompts_per_step=4", "rl.group_size=4", "checkpoint.every=0", "log.audit=false",
        "stages=[grpo]", "rl.steps=1", "rl.lr=1e-3"]


def test_rl_stages_warm_up_by_default(tmp_path):
    """A stage's first RL step runs at a tenth of rl.lr, not at the full rate of a fresh AdamW."""
    run = tmp_path / "run"
    train(load_config(None, BASE + [f"run_dir={run}", "rl.steps=2", "rl.lr=1e-4"]))
    lrs = [json.loads(line)["lr"] for line in (run / "metrics.jsonl").read_text().splitlines() if '"lr"' in line]
    assert lrs[:2] == pytest.approx([1e-5, 2e-5])


def test_embed_lr_scale_makes_a_second_group_for_the_table():
    model = load_policy(ModelConfig(path="tiny")).model
    table = model.get_input_embeddings().weight
    opt, sched = make_optimizer(model, 1e-3, 2, 10, False, OptimConfig(), embed_scale=0.1)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([5e-4, 5e-5])  # warm-up applies to both
    assert opt.param_groups[1]["params"] == [table] and all(p is not table for p in opt.param_groups[0]["params"])
    assert len(make_optimizer(model, 1e-3, 0, 10, False, OptimConfig())[0].param_groups) == 1


@pytest.mark.parametrize("scale", [0.0, 1.0])
def test_embed_lr_scale_zero_freezes_the_table_in_training(tmp_path, monkeypatch, scale):
    """rl.embed_lr_scale=0: an RL step moves the body and leaves the embedding table as it was; 1 moves both."""
    monkeypatch.setattr(rl, "advantages", lambda ctx, r, a, tracker: torch.linspace(-1, 1, len(r.verdicts)))
    run = tmp_path / "run"
    train(load_config(None, BASE + [f"run_dir={run}", "rl.warmup=0", f"rl.embed_lr_scale={scale}",
                                    "model.path=tiny", "seed=0"]))
    start, end = load_policy(ModelConfig(path="tiny")).model, load_policy(ModelConfig(path=str(run))).model
    embed_moved = not torch.equal(start.get_input_embeddings().weight, end.get_input_embeddings().weight)
    body = [n for n, _ in start.named_parameters() if "embed" not in n and "lm_head" not in n]
    s, e = dict(start.named_parameters()), dict(end.named_parameters())
    assert any(not torch.equal(s[n], e[n]) for n in body)
    assert embed_moved == (scale > 0)


def test_embed_lr_scale_zero_takes_no_table_gradient_and_thaws_it_after_the_stage(tmp_path, monkeypatch):
    """rl.embed_lr_scale=0 skips the table's gradient (no (vocab x hidden) weight gradient, no AdamW state for it)
    during the RL stage, and the table is trainable again for a stage after it."""
    seen = {}
    real_update = rl.rl_update

    def update(ctx, *args, **kwargs):
        out = real_update(ctx, *args, **kwargs)
        table = ctx.policy.model.get_input_embeddings().weight
        seen.update(requires_grad=table.requires_grad, grad=table.grad, in_opt=any(
            p is table for g in args[4].param_groups for p in g["params"]))
        seen["model"] = ctx.policy.model
        return out

    monkeypatch.setattr(rl, "rl_update", update)
    monkeypatch.setattr(rl, "advantages", lambda ctx, r, a, tracker: torch.linspace(-1, 1, len(r.verdicts)))
    train(load_config(None, BASE + [f"run_dir={tmp_path / 'run'}", "rl.embed_lr_scale=0", "model.path=tiny"]))
    assert seen["requires_grad"] is False and seen["grad"] is None and not seen["in_opt"]
    assert seen["model"].get_input_embeddings().weight.requires_grad
