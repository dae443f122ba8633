"""Infrastructure failures (`infra_error`): their own status, never a 0 reward, out of the loss, counted per step."""
import json

import torch

from codechat.config.io import load_config
from codechat.rollout.collect import fill_infra
from codechat.sandbox.pool import merge
from codechat.train import train
from codechat.verifier.verdict import STATUSES, Verdict
from codechat.verifier.verify import Verifier


def test_a_lost_sandbox_is_an_infra_error():
    assert "infra_error" in STATUSES
    assert merge(None).status == "infra_error"
    assert merge({"fatal": "BrokenPipeError"}).status == "infra_error"


def test_infra_samples_take_their_group_mean_not_zero():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # (N,)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    infra = [False, False, True, True, True, False]
    out = fill_infra(rewards, groups, infra)
    assert out.tolist() == [1.0, 0.0, 0.5, 1.0, 1.0, 1.0]
    assert fill_infra(rewards, groups, [True] * 6).tolist() == [0.0] * 6
    assert fill_infra(rewards, groups, [False] * 6) is rewards


def test_grpo_leaves_infra_errors_out_of_the_loss_and_counts_them(tmp_path, monkeypatch):
    import codechat.train.rl as rl

    def fake_verify_many(self, pairs):  # sample i: passed, failed, infra_error, infra_error, ...
        kinds = ["passed", "failed", "infra_error", "infra_error"]
        return [Verdict(kinds[i % 4], kinds[i % 4] == "passed", float(kinds[i % 4] == "passed"))
                for i, _ in enumerate(pairs)]

    seen_rows = []
    real_update = rl.rl_update

    def spy(ctx, r, adv, rows, *a, **kw):
        seen_rows.append((rows.tolist(), [r.verdicts[i].status for i in rows.tolist()], r.rewards.tolist()))
        return real_update(ctx, r, adv, rows, *a, **kw)

    monkeypatch.setattr(Verifier, "verify_many", fake_verify_many)
    monkeypatch.setattr(rl, "rl_update", spy)
    run = tmp_path / "g"
    train(load_config(None, ["data.train=builtin:toy", "sampling.max_new_tokens=8", "log.progress=false",
                             "log.plot=false", "log.audit=false", "verifier.workers=1", "rl.prompts_per_step=2",
                             "rl.group_size=4", "checkpoint.every=0", "rl.steps=1", "stages=[grpo]",
                             f"run_dir={run}", "model.path=tiny"]))
    (rows, statuses, rewards), = seen_rows
    assert rows == [0, 1, 4, 5] and "infra_error" not in statuses
    assert rewards == [1.0, 0.0, 0.5, 0.5] * 2  # an infra sample takes its group's mean, never 0
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert metrics["infra_errors"] == 4.0


def test_a_stdio_test_lost_to_the_infrastructure_makes_the_verdict_infra_error():
    from codechat.config import VerifierConfig
    from codechat.sandbox import RunResult
    from codechat.tasks import Task
    from codechat.tasks.stdio import IOTest, StdioSpec
    from codechat.verifier.stdio import StdioRun

    run = StdioRun(Task("t", "", [], stdio=StdioSpec([IOTest("", "1\n")] * 3)), "print(1)", VerifierConfig())
    for r in [RunResult("failed", "WrongAnswer", "wrong output", outputs=[0.0, 0.1]), merge(None),
              RunResult("passed", outputs=[0.0, 0.1])]:
        run.add(r)
    v = run.verdict()
    assert (v.status, v.passed, v.error_type) == ("infra_error", False, "SandboxError")
