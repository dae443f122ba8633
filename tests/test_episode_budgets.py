"""An episode's length rewards and Dr. GRPO's constant read the model's own token budget, and only a cut for
length counts as an overlong truncation."""
import dataclasses

import pytest

from codechat.config import RewardConfig
from codechat.config.io import load_config
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.train.episodes import episodes_to_rollouts, model_token_budget
from codechat.train.rl import stage_algo
from codechat.train.sft import warn_long_turns
from tests.test_episode_rollouts import TASK, episode

OVERLONG = RewardConfig(components={"pass-all": 1.0, "overlong": 1.0})


def truncated(reason):
    e = episode([1], [(True, 4), (False, 30), (True, 4)])
    return dataclasses.replace(e, truncated=reason)


@pytest.mark.parametrize("reason, penalty", [("", 0.0), ("turns", 0.0), ("tool_calls", 0.0), ("wall", 0.0),
                                             ("tokens", -1.0), ("context", -1.0)])
def test_overlong_penalises_only_a_cut_for_length(reason, penalty):
    r = episodes_to_rollouts([TASK], [truncated(reason)], 1, 0, OVERLONG, 100)
    assert r.components["overlong"].tolist() == [penalty]


def test_overlong_compares_model_tokens_with_the_model_token_budget():
    # 8 model tokens and 30 tool-result tokens: with a budget of 40 the ramp (from 30) sees 8, not 38
    r = episodes_to_rollouts([TASK], [truncated("")], 1, 0, OVERLONG, 40)
    assert r.components["overlong"].tolist() == [0.0]


def test_the_model_token_budget_is_turns_times_turn_tokens_capped_by_the_task():
    cfg = load_config(None, ["agent.turn_tokens=100"])
    lim = dataclasses.replace(TASK.limits, max_turns=5, max_tokens=4096)
    assert model_token_budget(dataclasses.replace(TASK, limits=lim), cfg.agent) == 500
    lim = dataclasses.replace(lim, max_tokens=300)
    assert model_token_budget(dataclasses.replace(TASK, limits=lim), cfg.agent) == 300


def test_dr_grpo_constant_is_the_episode_model_token_budget_for_repository_tasks():
    cfg = load_config(None, ["algo.agg=seq-mean-token-sum-norm", "sampling.max_new_tokens=64",
                             "agent.turn_tokens=50"])
    tasks = load_repo_tasks("builtin:repo-train")
    want = max(min(t.limits.max_turns * 50, t.limits.max_tokens) for t in tasks)
    assert want != 64
    assert stage_algo(cfg, "grpo", tasks).agg_norm == want
    assert stage_algo(cfg, "grpo").agg_norm == 64  # single answers: the generation budget


def test_expert_turns_longer_than_the_turn_budget_warn_once(recwarn):
    eps = [episode([1], [(True, 5), (False, 3), (True, 12)]), episode([1], [(True, 4)])]
    warn_long_turns(eps, 20)
    assert not recwarn.list
    with pytest.warns(UserWarning, match=r"sft: 1 of 3 expert turns are longer than agent.turn_tokens=10 "
                                         r"\(longest 12 tokens\)"):
        warn_long_turns(eps, 10)
