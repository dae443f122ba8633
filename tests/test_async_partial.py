"""Partial rollouts (rl.partial_rollouts): a repository episode carried over a weight update at a turn boundary.
Each turn records the policy version that sampled it, its log-probs are those of the weights that sampled it
(so the loss's behaviour log-probs are per segment), the KV of earlier turns is not reused across the switch,
and the producer switches an episode in progress to the weights the trainer publishes."""
import json
import threading

import pytest
import torch

from codechat import CodechatError
from codechat.config import AgentConfig, SamplingConfig
from codechat.config.io import load_config
from codechat.policy.logprobs import completion_logprobs
from codechat.policy.sampler import Sampler
from codechat.rollout.agents import ModelAgent, ScriptedAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.tools import format_call
from codechat.tasks.repo import RepoLimits
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.train import rl, train
from codechat.train.episodes import episodes_to_rollouts
from codechat.train.producer import AsyncProducer
from codechat.verifier.repo import RepoJudge
from policy_helpers import tiny_policy

BASE = ["data.train=builtin:repo-train", "data.eval=", "log.progress=false", "log.plot=false", "log.audit=false",
        "checkpoint.every=0", "rl.prompts_per_step=2", "rl.group_size=2", "rl.lr=1e-2", "agent.turn_tokens=8",
        "sampling.max_new_tokens=8", "model.device=cpu", "stages=[grpo]"]


@pytest.fixture(scope="module")
def judge():
    with RepoJudge() as j:
        yield j


def test_each_turn_records_the_version_before_turn_returned(judge):
    task = generate_repo_tasks("train", 1, seed=0)[0]
    calls = [format_call("list_files"), format_call("read_file", path="README.md"), format_call("submit")]
    versions = iter([3, 3, 5])
    (r,) = EpisodeRunner(ScriptedAgent(lambda t, turn, last: calls[turn]), judge, AgentConfig()).run(
        [(task, 0)], before_turn=lambda: next(versions))
    assert [u.version for u in r.transcript.turns] == [3, 3, 5]
    (plain,) = EpisodeRunner(ScriptedAgent(lambda t, turn, last: calls[turn]), judge, AgentConfig()).run([(task, 0)])
    assert [u.version for u in plain.transcript.turns] == [0, 0, 0]


def test_segment_logprobs_are_the_weights_that_sampled_them(judge, tmp_path_factory):
    """Turn 0 sampled by A, the rest by B (loaded in place between turns, as the producer does): each segment's
    recorded log-probs equal a full forward pass of its own weights and not of the other's."""
    acting = tiny_policy(tmp_path_factory)
    a = {k: v.clone() for k, v in acting.model.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    b = {k: v + 0.05 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v for k, v in a.items()}
    agent = ModelAgent(acting, SamplingConfig(temperature=1.0, max_new_tokens=8), sampler=Sampler(acting))
    tasks = generate_repo_tasks("train", 2, seed=1)
    for t in tasks:
        t.limits = RepoLimits(max_turns=2, max_tokens=100_000)
    calls = []

    def before_turn():
        calls.append(1)
        if len(calls) == 2:
            acting.model.load_state_dict(b)
        return 0 if len(calls) == 1 else 1

    res = EpisodeRunner(agent, judge, AgentConfig(turn_tokens=8)).run([(tasks[0], 0), (tasks[1], 0)], seed=3,
                                                                       before_turn=before_turn)
    assert any(len(e.transcript.turns) >= 2 for e in res)  # some episode was carried over the switch
    r = episodes_to_rollouts(tasks, res, 1, 0, None, 100_000)
    scored = {}
    with torch.no_grad():
        for name, w in (("a", a), ("b", b)):
            acting.model.load_state_dict(w)
            scored[name] = completion_logprobs(acting.model, r.prompts, r.batch.prompt_index, r.batch.tokens,
                                               r.batch.mask)  # (N, T)
    for i, e in enumerate(res):
        t = e.transcript
        for u in t.turns:
            cols = slice(u.model_start - t.prompt_len, u.model_end - t.prompt_len)
            rec = r.batch.logprobs[i, cols]  # the behaviour log-probs the loss corrects against
            own, other = (scored["a"], scored["b"]) if u.version == 0 else (scored["b"], scored["a"])
            assert torch.allclose(rec, own[i, cols], atol=1e-4)
            assert u.model_end == u.model_start or (rec - other[i, cols]).abs().max() > 1e-3


def test_producer_carries_an_episode_over_the_update(tmp_path, short_tasks, monkeypatch):
    """The second turn of batch 1 waits (test spy) until the trainer has published update 1's weights: batch 1's
    episodes are then version 0 on turn 0 and version 1 on turn 1, and the metrics count the carried turns."""
    seen, real_update = [], rl.rl_update

    def spy(ctx, r, adv, rows, ref, opt, a):
        seen.append(r)
        return real_update(ctx, r, adv, rows, ref, opt, a)
    monkeypatch.setattr(rl, "rl_update", spy)
    real_produce, real_newest = AsyncProducer._produce, AsyncProducer._newest

    def produce(self, snap, tasks, seed, step, version):
        self.test_step, self.test_calls = step, 0
        return real_produce(self, snap, tasks, seed, step, version)

    def newest(self):
        self.test_calls += 1
        if self.test_step == 1 and self.test_calls == 2:
            ev = threading.Event()
            while self._published is None or self._published[0] < 1:
                ev.wait(0.01)
        return real_newest(self)
    monkeypatch.setattr(AsyncProducer, "_produce", produce)
    monkeypatch.setattr(AsyncProducer, "_newest", newest)
    run = tmp_path / "partial"
    train(load_config(None, BASE + [f"run_dir={run}", "rl.steps=2", "rl.async_steps=1", "rl.partial_rollouts=true",
                                    "rl.zero_variance=keep"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [m for m in rows if "pass_rate" in m]
    assert [m["async/staleness"] for m in rows] == [0.0, 1.0]  # the batch's starting version: an upper bound
    assert [[u.version for u in e.transcript.turns] for e in seen[0].episodes] == [[0, 0]] * 4
    versions = [[u.version for u in e.transcript.turns] for e in seen[1].episodes]
    assert versions == [[0, 1]] * 4
    assert rows[0]["async/partial_turns_frac"] == 0.0 and rows[1]["async/partial_turns_frac"] == 0.5
    assert all(m["loss"] == m["loss"] for m in rows)
    logged = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert [x["turn_versions"] for x in logged] == [[0, 0]] * 4 + [[0, 1]] * 4  # recorded in the run directory


def test_partial_rollouts_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(CodechatError, match="rl.partial_rollouts needs rl.async_steps"):
        train(load_config(None, BASE + [f"run_dir={tmp_path / 'a'}", "rl.partial_rollouts=true"]))
    with pytest.raises(CodechatError, match="rl.partial_rollouts needs repository tasks"):
        train(load_config(None, BASE + [f"run_dir={tmp_path / 'b'}", "data.train=builtin:toy", "rl.steps=1",
                                        "rl.async_steps=1", "rl.partial_rollouts=true"]))


def test_synchronous_episodes_record_the_step_as_version(tmp_path, short_tasks):
    run = tmp_path / "sync"
    train(load_config(None, BASE + [f"run_dir={run}", "rl.steps=2"]))
    logged = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert [x["turn_versions"] for x in logged] == [[0, 0]] * 4 + [[1, 1]] * 4
