"""Advantage estimators against hand-computed values and loop references; the registry's refusals."""
import math
from dataclasses import replace

import pytest
import torch

from codechat.algos import (ADVANTAGES, DifficultyTracker, Registry, UnknownNameError, check_config,
                            compute_advantages, zero_variance_groups)
from codechat.config import AlgoConfig

CFG = AlgoConfig()


def adv(name, rewards, groups, **kw):
    return compute_advantages(name, torch.tensor(rewards, dtype=torch.float32), torch.tensor(groups),
                              replace(CFG, **kw))


def close(a, b):
    assert torch.allclose(a, torch.tensor(b, dtype=a.dtype), atol=1e-5), (a, b)


def test_grpo_hand_computed():
    # [1,0,0,0]: mean 1/4, unbiased var (9/16 + 3/16)/3 = 1/4, std 1/2
    close(adv("grpo", [1, 0, 0, 0], [0, 0, 0, 0], eps=0.0), [1.5, -0.5, -0.5, -0.5])
    # G=2, one pass one fail: mean 1/2, std sqrt(1/2)
    s = math.sqrt(0.5)
    close(adv("grpo", [1, 0], [7, 7], eps=0.0), [0.5 / s, -0.5 / s])


def test_all_equal_groups_give_zero_not_nan():
    for name in ("grpo", "grpo-mean-only", "rloo"):
        for scale in ("group", "batch", "none"):
            close(adv(name, [1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1], eps=0.0, std_scale=scale), [0.0] * 6)
    close(adv("batch-mean", [1, 1, 1, 1], [0, 0, 1, 1], eps=0.0), [0.0] * 4)
    close(adv("grpo", [0.3], [4]), [0.0])  # a lone sample has no baseline


def test_grpo_mean_only_and_batch_std():
    close(adv("grpo-mean-only", [1, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1]), [0.75, -0.25, -0.25, -0.25, 0, 0])
    r = torch.tensor([1.0, 0, 0, 0, 1, 0])
    got = adv("grpo", r.tolist(), [0, 0, 0, 0, 1, 1], std_scale="batch", eps=0.0)
    close(got, ((torch.tensor([0.75, -0.25, -0.25, -0.25, 0.5, -0.5])) / r.std()).tolist())


def test_grpo_zero_mean_per_group():
    g = torch.Generator().manual_seed(0)
    r = torch.rand(40, generator=g)
    ids = torch.randint(0, 6, (40,), generator=g) * 3  # non-contiguous ids
    a = compute_advantages("grpo", r, ids, CFG)
    for k in ids.unique():
        assert abs(a[ids == k].mean().item()) < 1e-5


def test_rloo_equals_loop_mean_of_the_others():
    g = torch.Generator().manual_seed(1)
    r = torch.rand(30, generator=g)
    ids = torch.randint(0, 5, (30,), generator=g)
    a = compute_advantages("rloo", r, ids, CFG)
    for i in range(30):
        others = [r[j].item() for j in range(30) if j != i and ids[j] == ids[i]]
        want = r[i].item() - sum(others) / len(others) if others else 0.0
        assert abs(a[i].item() - want) < 1e-5
    close(adv("rloo", [1, 0], [0, 0]), [1.0, -1.0])  # G=2: the other one is the baseline


def test_filter_and_batch_mean():
    close(adv("filter", [1.1, 0.1, 1.0, 0.0], [0, 0, 1, 1]), [1, 0, 1, 0])
    close(adv("batch-mean", [1, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2], std_scale="none"),
          [1 / 3, -2 / 3, -2 / 3, 1 / 3, 1 / 3, 1 / 3])


def test_zero_variance_groups():
    mask, frac = zero_variance_groups(torch.tensor([1.0, 1, 0, 1, 0, 0, 0.5]), torch.tensor([0, 0, 1, 1, 2, 2, 3]))
    assert mask.tolist() == [True, True, False, False, True, True, True]
    assert frac == 0.75


def test_weights_multiply_and_difficulty_tracker():
    t = DifficultyTracker(alpha=1.0, ema=0.5)
    assert torch.equal(t.weights(["a", "b"]), torch.ones(2))  # both unseen: prior 0.5
    t.update(["a", "a", "b", "b"], [1, 1, 0, 1])  # a: 1.0, b: 0.5
    t.update(["a", "a"], [0, 0])  # a: 0.5 * 1.0 + 0.5 * 0.0
    assert t.pass_rate("a") == 0.5 and t.pass_rate("b") == 0.5
    t.update(["b"], [0.0])  # b: 0.25
    w = t.weights(["a", "b"])  # hardness 0.5, 0.75 -> mean 1
    close(w, [0.5 / 0.625, 0.75 / 0.625])
    a = compute_advantages("grpo-mean-only", torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), CFG, weights=w)
    close(a, [0.5 * w[0].item(), -0.5 * w[1].item()])
    assert torch.equal(DifficultyTracker(alpha=0.0).weights(["x", "y"]), torch.ones(2))
    t2 = DifficultyTracker(alpha=1.0)
    t2.load_state_dict(t.state_dict())
    assert t2.rates == t.rates


def test_unknown_name_lists_valid_names():
    with pytest.raises(UnknownNameError, match="grpo, grpo-mean-only, rloo"):
        adv("ppo", [1.0], [0])
    with pytest.raises(UnknownNameError, match="valid: .*rloo"):
        check_config(replace(CFG, advantage="rlo"))


def test_registering_twice_is_refused_and_signatures_are_checked():
    with pytest.raises(ValueError, match="already registered"):
        ADVANTAGES.register("grpo")(lambda rewards, group_ids, cfg: rewards)
    reg = Registry("thing", ("x", "cfg"))
    with pytest.raises(TypeError, match="parameters"):
        reg.register("bad")(lambda x, y: x)
    reg.register("ok")(lambda x, cfg: x)
    assert "ok" in reg and reg.names() == ["ok"]


def test_check_config_ranges():
    check_config(CFG)
    with pytest.raises(Exception, match="dual_clip"):
        check_config(replace(CFG, dual_clip=0.5))
    with pytest.raises(Exception, match="std_scale"):
        check_config(replace(CFG, std_scale="groups"))
