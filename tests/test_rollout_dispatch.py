"""One function chooses between single answers and episodes for every stage; ragged rows are padded with the
pad id they are given, never one read off the data."""
import inspect
from types import SimpleNamespace

import torch

from codechat.config import RewardConfig
from codechat.policy import SampleBatch
from codechat.policy.sampler import pad_rows
from codechat.rollout.collect import Rollouts, rollout_metrics
from codechat.tasks.repo import RepoTask
from codechat.train import dpo, groups, producer, rft, rollouts
from codechat.verifier import Verdict

PASS, FAIL = (Verdict(status=s, passed=s == "passed", reward=float(s == "passed")) for s in ("passed", "failed"))


def test_no_stage_chooses_between_answers_and_episodes_itself():
    for stage in (groups, rft, dpo, producer):
        src = inspect.getsource(stage)
        assert "collect_rollouts(" in src, stage.__name__
        assert "collect_episodes(" not in src and " collect(" not in src, stage.__name__


def test_single_answers_are_scored_with_the_runs_reward_config(monkeypatch):
    seen = {}
    monkeypatch.setattr(rollouts, "collect", lambda policy, engine, verifier, tasks, g, sampling, rewards, seed,
                        stream: seen.update(rewards=rewards, stream=stream, policy=policy) or "answers")
    cfg = SimpleNamespace(rewards=RewardConfig(components={"pass-all": 1.0, "length": 0.1}), sampling=None,
                          rollout=SimpleNamespace(verify_while_decoding=True))
    ctx = SimpleNamespace(cfg=cfg, policy="policy", verifier=None)
    assert rollouts.collect_rollouts(ctx, None, [object()], 2, seed=1) == "answers"
    assert seen == {"rewards": cfg.rewards, "stream": True, "policy": "policy"}
    monkeypatch.setattr(rollouts, "collect_episodes", lambda ctx, engine, tasks, g, seed, policy, before_turn:
                        ("episodes", policy))
    repo = RepoTask.__new__(RepoTask)
    assert rollouts.collect_rollouts(ctx, None, [repo], 2, seed=1, policy="copy") == ("episodes", "copy")


def test_pad_rows_keeps_each_rows_mask_and_fills_with_the_given_pad_id():
    tokens, mask, lp = pad_rows([[5, 77, 6], [8]], pad_id=3, masks=[[1, 0, 1], [1]], logprobs=[[-1, 0, -2], [-3]])
    assert tokens.tolist() == [[5, 77, 6], [8, 3, 3]]
    assert mask.tolist() == [[1, 0, 1], [1, 0, 0]]
    assert lp.tolist() == [[-1, 0, -2], [-3, 0, 0]]
    assert pad_rows([[4, 4], []], pad_id=9)[1].tolist() == [[1, 1], [0, 0]]


def episode_rollouts(first_hole_token: int) -> Rollouts:
    """Two groups of two episode-shaped rows: a tool-result token (mask 0) before padding."""
    tokens = torch.tensor([[5, first_hole_token, 6], [5, 6, 0], [7, first_hole_token, 8], [7, 0, 0]])
    mask = torch.tensor([[1., 0., 1.], [1., 1., 0.], [1., 0., 1.], [1., 0., 0.]])
    batch = SampleBatch(torch.tensor([0, 0, 1, 1]), tokens, mask, torch.zeros(4, 3), ["stop"] * 4, ["t"] * 4,
                        torch.tensor([3, 2, 3, 1]))
    tasks = [SimpleNamespace(task_id=t, kind="code") for t in "ab"]
    return Rollouts(tasks, [[1], [2]], batch, [PASS, FAIL, PASS, FAIL], torch.tensor([1., 0., 1., 0.]))


def test_resampled_groups_are_padded_with_the_runs_pad_id_not_a_tool_result_token():
    a, b = episode_rollouts(first_hole_token=77), episode_rollouts(first_hole_token=77)
    r = groups.merge_keep_signal(a, b, want=3, pad_id=0)
    assert r.batch.tokens.shape == (6, 3)
    pad = r.batch.tokens[r.batch.mask == 0]  # holes keep their token (77), padding is the pad id
    assert sorted(set(pad.tolist())) == [0, 77]
    assert r.batch.tokens[1, 2] == 0 and r.batch.tokens[3, 1:].tolist() == [0, 0]
    assert r.batch.mask[0].tolist() == [1, 0, 1]


def test_response_length_of_an_episode_counts_model_tokens_only():
    r = episode_rollouts(first_hole_token=77)
    r.episodes = ["e"] * 4  # episode rows: tool results (mask 0) inside n_tokens
    m = rollout_metrics(r)
    assert m["response_len_mean"] == (2 + 2 + 2 + 1) / 4 and m["response_len_max"] == 2
    r.episodes = []  # single answers: every new token is the response
    assert rollout_metrics(r)["response_len_mean"] == (3 + 2 + 3 + 1) / 4
