"""Training: every stage changes the weights with a finite loss; resume is exact; GRPO raises the pass rate
on the toy task set; configs are validated. Runs on the tiny preset on CPU."""
import json
import shutil

import pytest
import torch

from codechat.config.io import ConfigError, load_config
from codechat.train import train
from codechat.train.checkpoint import Checkpointer

# SFT on toy-sft (every other reference returns N + 1) leaves a mistake only the verifier can fix.
BASE = ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "sampling.max_new_tokens=12", "log.progress=false",
        "log.plot=false", "verifier.workers=2", "rl.prompts_per_step=4", "rl.group_size=4", "checkpoint.every=0"]


def weights(model_dir):
    from safetensors.torch import load_file
    return load_file(str(model_dir / "model.safetensors"))


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory):
    """A tiny model that has learned the toy format (about half its answers are right)."""
    run = tmp_path_factory.mktemp("sft")
    train(load_config(None, BASE + [f"run_dir={run}", "stages=[sft]", "sft.steps=30", "sft.lr=3e-3",
                                    "sft.batch_size=16"]))
    return Checkpointer(run).latest() / "model"


def run_stage(tmp_path, model, stage, extra=()):
    run = tmp_path / stage
    train(load_config(None, BASE + [f"run_dir={run}", f"stages=[{stage}]", f"model.path={model}", *extra]))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return run, rows


STAGE_ARGS = {
    "sft": ["sft.steps=2", "sft.batch_size=4"],
    "rft": ["rft.rounds=1", "rft.prompts=8", "rft.group_size=4", "rft.steps=2", "rft.batch_size=4"],
    "grpo": ["rl.steps=2", "rl.lr=1e-3", "algo.kl_beta=0.04"],
    "rloo": ["rl.steps=2", "rl.lr=1e-3", "algo.loss=reinforce"],
    "dpo": ["dpo.steps=2", "dpo.prompts_per_step=4", "dpo.group_size=4", "dpo.lr=1e-3"],
}


@pytest.mark.parametrize("stage", sorted(STAGE_ARGS))
def test_stage_changes_weights_and_loss_is_finite(tmp_path, sft_model, stage):
    run, rows = run_stage(tmp_path, sft_model, stage, STAGE_ARGS[stage])
    losses = [r["loss"] for r in rows if r.get("loss") is not None]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    before, after = weights(sft_model), weights(Checkpointer(run).latest() / "model")
    assert any(not torch.equal(before[k], after[k]) for k in before), f"{stage} did not change the weights"
    assert (run / "config.yaml").is_file()


def test_grpo_logs_diagnostics(tmp_path, sft_model):
    _, rows = run_stage(tmp_path, sft_model, "grpo", ["rl.steps=1", "algo.kl_beta=0.04"])
    keys = {"reward_mean", "pass_rate", "zero_var_frac", "group_std_mean", "response_len_mean", "truncated_frac",
            "kl", "entropy", "clip_frac_low", "clip_frac_high", "grad_norm", "lr", "new_tokens_per_s",
            "time/sample_s", "time/verify_s", "time/update_s", "logp_gap_mean", "logp_gap_max", "tis_ratio_mean"}
    assert keys <= set(rows[-1]), keys - set(rows[-1])
    assert any(k.startswith("verdict/") for k in rows[-1])
    # sampler and trainer agree at temperature 1 without truncation (the gap is logged with the correction off)
    assert rows[-1]["logp_gap_max"] < 1e-3


def test_resume_is_exact(tmp_path, sft_model):
    args = ["stages=[grpo]", f"model.path={sft_model}", "rl.steps=4", "rl.lr=1e-3", "checkpoint.every=1",
            "checkpoint.keep_last=10", "algo.kl_beta=0.04", "algo.difficulty_alpha=1.0"]  # step 3 revisits prompts
    straight = tmp_path / "straight"
    train(load_config(None, BASE + [f"run_dir={straight}", *args]))
    halted = tmp_path / "halted"
    train(load_config(None, BASE + [f"run_dir={halted}", *args]))
    ck = halted / "checkpoints"
    for d in sorted(ck.iterdir())[2:]:  # as if killed after step 2 ...
        shutil.rmtree(d)
    (ck / "step-0000003.tmp").mkdir()  # ... in the middle of saving step 3
    train(resume=halted)
    a, b = weights(straight / "checkpoints" / "step-0000004" / "model"), weights(ck / "step-0000004" / "model")
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(line)["step"] for line in (halted / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # records after the checkpoint were replaced, not duplicated


def test_grpo_raises_pass_rate(tmp_path, sft_model):
    _, rows = run_stage(tmp_path, sft_model, "grpo", ["rl.steps=16", "rl.lr=2e-4", "rl.group_size=8",
                                                      "algo.clip_high=0.28"])
    rates = [r["pass_rate"] for r in rows if "pass_rate" in r]
    first, last = sum(rates[:4]) / 4, sum(rates[-4:]) / 4
    assert last > first + 0.15, rates


def test_fresh_run_refuses_a_dir_with_checkpoints(tmp_path, sft_model):
    run_stage(tmp_path, sft_model, "sft", STAGE_ARGS["sft"])
    from codechat import CodechatError
    with pytest.raises(CodechatError, match="--resume"):
        run_stage(tmp_path, sft_model, "sft", STAGE_ARGS["sft"])


@pytest.mark.parametrize("override,needle", [
    ("rl.lrr=1", "unknown config key 'rl.lrr'"), ("rl.lr=fast", "rl.lr: expected a number"),
    ("stages=[ppo]", "unknown stage 'ppo'"), ("algo.advantage=grp", "valid: batch-mean"),
    ("rl.zero_variance=drop", "rl.zero_variance"), ("rewards={pass: 1}", "unknown reward 'pass'"),
    ("dist.parallel=zero3", "dist.parallel"),
])
def test_bad_config_values_fail_with_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("(", r"\(")):
        load_config(None, [override])


def test_fsdp_with_lora_is_refused():
    with pytest.raises(ConfigError, match="dist.parallel=fsdp: not with LoRA"):
        load_config(None, ["dist.parallel=fsdp", "model.lora_r=8"])


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)


def test_lora_reference_is_the_base_with_adapters_off():
    """The trainer's reference log-probs of a LoRA policy (rl.frozen_logprobs as_reference) are the base model's,
    even once the adapters have moved; without as_reference they are the adapted policy's."""
    pytest.importorskip("peft")
    from codechat.config import ModelConfig
    from codechat.policy import load_policy
    from codechat.train.common import reference_model
    from codechat.train.rl import frozen_logprobs
    from train_helpers import fixed_rollouts

    base = load_policy(ModelConfig(path="tiny", device="cpu")).model
    policy = load_policy(ModelConfig(path="tiny", device="cpu", lora_r=4))
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn_like(p) * 0.5)  # adapters with an effect
    ctx = type("Ctx", (), {"policy": policy})()
    ref = reference_model(ctx)
    assert ref is policy.model  # no second copy of the weights
    r = fixed_rollouts(base.config.vocab_size)
    rows = torch.arange(len(r.rewards))
    want = frozen_logprobs(base, r, rows, 1.0)
    assert torch.allclose(frozen_logprobs(ref, r, rows, 1.0, as_reference=True), want, atol=1e-5)
    assert not torch.allclose(frozen_logprobs(ref, r, rows, 1.0), want, atol=1e-2)


def test_capability_regression_eval_is_logged(tmp_path, sft_model, monkeypatch):
    """An extra eval set that falls by more than eval.regression_margin from the stage start warns and is flagged
    (`eval_NAME/...regressed`); one that holds is not."""
    import codechat.train.common as common

    calls = []

    def fake_eval(policy, verifier, tasks, **kw):  # extra set: 0.8 at step 1, then 0.5; held-out set: 0.3
        calls.append(len(tasks))
        extra = len(calls) % 2 == 0
        v = (0.8 if len(calls) == 2 else 0.5) if extra else 0.3
        return type("Report", (), {"metrics": {"pass@1": v, "greedy_pass@1": v, "mean_len": 3.0}})()

    monkeypatch.setattr(common, "evaluate_policy", fake_eval)
    with pytest.warns(UserWarning, match="capability regression: eval_basic/pass@1 fell from 0.800 to 0.500"):
        _, rows = run_stage(tmp_path, sft_model, "grpo", ["rl.steps=2", "eval.every=1", "data.eval=builtin:toy",
                                                          "data.extra_eval=[builtin:basic]", "data.max_eval_tasks=3"])
    assert rows[0]["eval_basic/pass@1"] == 0.8 and "eval_basic/pass@1/regressed" not in rows[0]
    assert rows[1]["eval_basic/pass@1"] == 0.5 and rows[1]["eval_basic/pass@1/regressed"] == 1.0
    assert "eval/pass@1/regressed" not in rows[1]  # the held-out set is not a regression baseline


def test_eval_metrics_are_logged(tmp_path, sft_model):
    _, rows = run_stage(tmp_path, sft_model, "grpo", ["rl.steps=1", "data.eval=builtin:toy",
                                                      "data.extra_eval=[builtin:basic]", "data.max_eval_tasks=3",
                                                      "eval.n=2", "eval.k=[1,2]"])
    last = rows[-1]
    assert {"eval/pass@1", "eval/pass@2", "eval/greedy_pass@1", "eval_basic/pass@1"} <= set(last), sorted(last)


def test_fsdp_in_one_process_warns_and_trains(tmp_path):
    with pytest.warns(UserWarning, match="nothing to shard"):
        train(load_config(None, BASE + [f"run_dir={tmp_path / 'r'}", "stages=[sft]", "sft.steps=1",
                                        "sft.batch_size=2", "dist.parallel=fsdp"]))
    assert Checkpointer(tmp_path / "r").latest() is not None


def test_rest_em_with_lora_restarts_each_round_from_the_starting_adapters(tmp_path, sft_model, monkeypatch):
    """rft.rest_em with model.lora_r > 0: every round's improve step starts from the stage's starting adapters
    (the base is frozen); it used to crash at round 1 loading merged weights into the PEFT model."""
    pytest.importorskip("peft")
    import codechat.train.rft as rft

    seen, after, real = [], [], rft.train_on_pairs

    def adapters(ctx):
        return {n: p.detach().clone() for n, p in ctx.policy.model.named_parameters() if p.requires_grad}

    def spy(ctx, *a, **k):
        seen.append(adapters(ctx))
        real(ctx, *a, **k)
        after.append(adapters(ctx))

    monkeypatch.setattr(rft, "train_on_pairs", spy)
    run, _ = run_stage(tmp_path, sft_model, "rft", ["model.lora_r=4", "rft.rest_em=true", "rft.rounds=2",
                                                    "rft.prompts=10", "rft.group_size=4", "rft.steps=2",
                                                    "rft.batch_size=4", "rft.lr=1e-2"])
    assert len(seen) == 2, "both rounds kept samples"
    assert any(not torch.equal(seen[0][k], after[0][k]) for k in seen[0]), "round 0 trained the adapters"
    assert all(torch.equal(seen[0][k], seen[1][k]) for k in seen[0]), "round 1 restarted from the start"
    assert json.loads((Checkpointer(run).latest() / "state.json").read_text())["global_step"] == 4
