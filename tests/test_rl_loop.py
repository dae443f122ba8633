"""The RL loop's bookkeeping, each test a bug that once was there: stage settings leaking into the next stage,
difficulty weighting wired through the trainer (weights, updates, checkpointed state), warmup by RL steps, the
zero-variance fraction after resampling, the sample std in group_std_mean, offline DPO's finish reasons, and the config checks that refuse settings which cannot work."""
import json
from types import SimpleNamespace

import pytest
import torch

from codechat.config import RLConfig
from codechat.config.io import ConfigError, load_config
from codechat.policy import SampleBatch
from codechat.rollout.collect import Rollouts, rollout_metrics
from codechat.tasks import Task
from codechat.train import dist, train
from codechat.train.checkpoint import TrainState
from codechat.train.common import Context
from codechat.train.rl import train_rows

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=12", "log.progress=false", "log.plot=false",
        "verifier.workers=2", "rl.prompts_per_step=4", "rl.group_size=4", "checkpoint.every=0", "log.audit=false"]


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def spy_advantages(monkeypatch):
    """Record (advantage name, weights) of every batch_advantages call the trainer makes."""
    calls, real = [], dist.batch_advantages

    def spy(name, rewards, group_ids, cfg, weights=None):
        calls.append((name, None if weights is None else weights.clone()))
        return real(name, rewards, group_ids, cfg, weights=weights)

    monkeypatch.setattr(dist, "batch_advantages", spy)
    return calls


def test_rloo_stage_does_not_leak_into_the_next_stage(tmp_path, spy_advantages):
    """stages=[rloo, grpo]: the grpo stage uses grpo advantages, and the caller's config is left as it was."""
    cfg = load_config(None, BASE + [f"run_dir={tmp_path}", "stages=[rloo,grpo]", "rl.steps=1"])
    train(cfg)
    assert [name for name, _ in spy_advantages] == ["rloo", "grpo"]
    assert cfg.algo.advantage == "grpo" and cfg.algo.agg_norm == 0.0


def _expected_rates(rollouts: list[dict], ema: float, upto: int) -> dict[str, float]:
    rates: dict[str, float] = {}
    for step in range(upto):
        per: dict[str, list[float]] = {}
        for r in rollouts:
            if r["step"] == step + 1:  # rollouts carry the metrics step (1-based) of the update that used them
                per.setdefault(r["task_id"], []).append(float(r["passed"]))
        for t, ps in per.items():
            m = sum(ps) / len(ps)
            rates[t] = m if t not in rates else ema * rates[t] + (1 - ema) * m
    return rates


def test_difficulty_weights_reach_the_advantages_and_the_checkpoint(tmp_path, spy_advantages):
    """algo.difficulty_alpha: the advantages of step s are weighted by (1 - rate)^alpha (mean 1) with the rates of
    steps < s, the rates follow the pass results in rollouts.jsonl, and every checkpoint holds them. 10 toy tasks,
    4 per step: step 3 revisits two prompts."""
    run = tmp_path / "run"
    alpha, ema = 2.0, 0.5
    train(load_config(None, BASE + [f"run_dir={run}", "stages=[grpo]", "rl.steps=3", "checkpoint.every=1",
                                    "checkpoint.keep_last=5",
                                    f"algo.difficulty_alpha={alpha}", f"algo.difficulty_ema={ema}",
                                    "sampling.temperature=1.5"]))
    rolls = records(run / "rollouts.jsonl")
    assert len(spy_advantages) == 3 and all(w is not None for _, w in spy_advantages)
    for step, (_, w) in enumerate(spy_advantages):
        rates = _expected_rates(rolls, ema, step)
        ids = [r["task_id"] for r in rolls if r["step"] == step + 1]
        h = torch.tensor([(1 - rates.get(t, 0.5)) for t in ids]).clamp_min(1e-3) ** alpha
        assert torch.allclose(w, h / h.mean(), atol=1e-6), step
    assert not torch.allclose(spy_advantages[2][1], torch.ones(16))  # revisited prompts: weights are not all 1
    for step in (1, 2, 3):
        state = json.loads((run / "checkpoints" / f"step-{step:07d}" / "state.json").read_text())
        got = state["extra"]["difficulty"]["rates"]
        assert got == pytest.approx(_expected_rates(rolls, ema, step)), step


def test_warmup_counts_rl_steps_not_inner_epochs(tmp_path):
    """rl.warmup=4 with rl.epochs=2: the lr of RL step k is k/4 of the peak, whatever the inner epochs."""
    run = tmp_path / "run"
    train(load_config(None, BASE + [f"run_dir={run}", "stages=[grpo]", "rl.steps=3", "rl.warmup=4", "rl.epochs=2",
                                    "rl.lr=1e-3"]))
    lrs = [r["lr"] for r in records(run / "metrics.jsonl")]
    assert lrs == pytest.approx([0.25e-3, 0.5e-3, 0.75e-3])


def _rollouts(rewards: list[list[float]], tasks: list[Task]) -> Rollouts:
    """Groups of fixed one-token completions with the given rewards."""
    G, P = len(rewards[0]), len(rewards)
    N = P * G
    batch = SampleBatch(torch.arange(P).repeat_interleave(G), torch.ones(N, 1, dtype=torch.long), torch.ones(N, 1),
                        torch.zeros(N, 1), ["stop"] * N, ["x"] * N, torch.ones(N, dtype=torch.long))

    class V:  # the verdict fields rollout_metrics reads
        def __init__(self, r):
            self.passed, self.status = r == 1.0, "passed" if r == 1.0 else "failed"

    flat = [x for g in rewards for x in g]
    return Rollouts(tasks, [[1]] * P, batch, [V(x) for x in flat], torch.tensor(flat, dtype=torch.float32))


def test_zero_var_frac_is_of_the_groups_trained_on_after_resampling(monkeypatch):
    """zero_variance=resample: the first draw has no signal, the second has; zero_var_frac describes the groups
    kept (0), the first draw's fraction is logged apart."""
    import codechat.train.groups as groups
    import codechat.train.rollouts as rollouts

    tasks = [Task(f"t{i}", "p", ["assert True"]) for i in range(4)]
    draws = iter([_rollouts([[0, 0], [1, 1]], tasks[:2]), _rollouts([[0, 1], [1, 0]], tasks[2:])])
    monkeypatch.setattr(rollouts, "collect", lambda *a, **k: next(draws))
    cfg = load_config(None, ["rl.prompts_per_step=2", "rl.group_size=2", "rl.zero_variance=resample"])
    policy = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=0))  # the pad id the resampled groups take
    ctx = Context(cfg, policy, None, None, None, TrainState(), None, tasks)
    r, extra = groups.sample_groups(ctx, None)
    metrics = rollout_metrics(r) | extra
    assert [t.task_id for t in r.tasks] == ["t2", "t3"]
    assert metrics["zero_var_frac"] == 0.0 and metrics["zero_var_frac_first"] == 1.0
    assert metrics["resample_rounds"] == 1 and metrics["samples"] == 8


def test_group_std_mean_is_the_sample_std_the_advantages_use():
    tasks = [Task(f"t{i}", "p", ["assert True"]) for i in range(2)]
    m = rollout_metrics(_rollouts([[1, 0], [1, 1]], tasks))
    assert m["group_std_mean"] == pytest.approx((0.5 ** 0.5 + 0.0) / 2)  # population std would give 0.25


def test_offline_dpo_appends_eos_only_where_the_sample_ended_with_one(tmp_path):
    from codechat.config import ModelConfig
    from codechat.policy import load_policy
    from codechat.train.dpo import offline_pairs

    policy = load_policy(ModelConfig(path="tiny", device="cpu"))
    eos = policy.tokenizer.eos_token_id
    task = Task("t", "Write f.", ["assert f() == 1"])
    recs = [{"step": 0, "task_id": "t", "completion": "def f(): return 1", "passed": True, "finish_reason": "stop",
             "eos": True},
            {"step": 0, "task_id": "t", "completion": "def f(): return 2", "passed": False,
             "finish_reason": "length", "eos": False},
            {"step": 1, "task_id": "t", "completion": "def f(): return 1", "passed": True, "finish_reason": "stop",
             "eos": True},
            {"step": 1, "task_id": "t", "completion": "def f(): return 3\n```", "passed": False,
             "finish_reason": "stop", "eos": False}]  # ended by a stop string
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    cfg = load_config(None, ["data.train=builtin:toy"])
    ctx = Context(cfg, policy, None, None, None, TrainState(), tmp_path, [task])
    pairs = offline_pairs(ctx, str(path))
    assert len(pairs) == 2
    for _, chosen, rejected in pairs:
        assert chosen[-1] == eos and eos not in rejected
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(recs[0]) + "\n{not json\n")
    from codechat import CodechatError
    with pytest.raises(CodechatError, match=r"bad.jsonl:2: invalid JSON"):
        offline_pairs(ctx, str(bad))


def test_rollouts_jsonl_records_how_each_sample_ended(tmp_path):
    run = tmp_path / "run"
    train(load_config(None, BASE + [f"run_dir={run}", "stages=[grpo]", "rl.steps=1", "sampling.max_new_tokens=6",
                                    "sampling.temperature=2.0"]))
    rolls = records(run / "rollouts.jsonl")
    assert {r["finish_reason"] for r in rolls} <= {"stop", "length"}
    assert any(r["finish_reason"] == "length" for r in rolls)  # 6 tokens: some samples are cut
    assert all(not r["eos"] for r in rolls if r["finish_reason"] == "length")


@pytest.mark.parametrize("overrides,needle", [
    (["algo.kl_beta=0.1", "algo.kl_estimator=k1"], "expected gradient of zero"),
    (["stages=[rloo]", "algo.loss=reinforce", "rl.epochs=2"], "reinforce needs one optimizer step"),
    (["stages=[grpo]", "algo.loss=reinforce", "rl.minibatch_size=4"], "reinforce needs one optimizer step"),
    (["sft.epochs_per_round=2"], "unknown config key 'sft.epochs_per_round'"),
    (["optim.beta2=1.0"], r"optim.beta2: expected in \[0, 1\), got 1.0"),
])
def test_settings_that_cannot_work_are_refused(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(None, overrides)


def test_k1_without_a_kl_term_and_reinforce_with_one_step_are_allowed():
    load_config(None, ["algo.kl_estimator=k1"])  # kl_beta = 0: no loss term
    load_config(None, ["stages=[rloo]", "algo.loss=reinforce", "rl.minibatch_size=32"])  # = P x G: one step


def test_mask_truncated_keeps_cut_episodes_out_of_the_loss_rows():
    """rl.mask_truncated (what the agent demo's GRPO uses): an episode cut by a budget (finish_reason `length`)
    teaches nothing, its reward 0 pushing down every call it made; zero-variance groups go first under skip."""
    tasks = [Task(f"t{i}", "p", ["assert True"]) for i in range(3)]
    r = _rollouts([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]], tasks)
    r.batch.finish_reason[:] = ["stop", "length", "stop", "length", "stop", "stop", "length", "stop"] + ["length"] * 4
    assert train_rows(r, RLConfig(zero_variance="skip", mask_truncated=True)).tolist() == [0, 2, 4, 5, 7]
    assert train_rows(r, RLConfig(zero_variance="skip", mask_truncated=False)).tolist() == list(range(8))
    assert train_rows(r, RLConfig(zero_variance="keep", mask_truncated=True)).tolist() == [0, 2, 4, 5, 7]
