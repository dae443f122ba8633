"""Policy losses against loop references: the clip stops the gradient exactly where it should; PPO = REINFORCE at
ratio 1; dual clip; truncated IS; DPO against its formula; every loss finite for random finite inputs."""
import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat.algos import (AGG_MODES, CORRECTIONS, KL_ESTIMATORS, POLICY_LOSSES, UnknownNameError, agg_loss, dpo_loss,
                            kl_loss, policy_loss)
from codechat.config import AlgoConfig

CFG = AlgoConfig(clip_low=0.2, clip_high=0.28)
RATIOS = [0.5, 0.79, 0.9, 1.0, 1.1, 1.27, 1.3, 2.0]  # around the interval [0.8, 1.28]


def grad_of(name, logp, old, adv, mask, cfg=CFG, **kw):
    x = logp.clone().requires_grad_(True)
    loss, metrics = policy_loss(name, x, old, adv, mask, cfg, **kw)
    loss.backward()
    return loss, x.grad, metrics


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_ppo_gradient_equals_reinforce_at_ratio_one(agg):
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=g) * 3
    adv = torch.randn(4, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    cfg = replace(CFG, agg=agg)
    _, g_ppo, m = grad_of("ppo-clip", old, old, adv, mask, cfg)
    _, g_pg, _ = grad_of("reinforce", old, old, adv, mask, cfg)
    assert torch.allclose(g_ppo, g_pg, atol=1e-6)
    assert m["ratio_mean"] == pytest.approx(1.0) and m["clip_frac_low"] == m["clip_frac_high"] == 0


@pytest.mark.parametrize("a", [1.0, -1.0])
def test_clip_stops_gradient_exactly_where_it_should(a):
    old = torch.full((1, len(RATIOS)), -1.0)
    logp = old + torch.tensor(RATIOS).log()[None]
    _, grad, m = grad_of("ppo-clip", logp, old, torch.tensor([a]), torch.ones_like(old))
    n = len(RATIOS)
    for t, r in enumerate(RATIOS):
        clipped = (a > 0 and r > 1.28) or (a < 0 and r < 0.8)  # the pessimistic bound is flat there
        want = 0.0 if clipped else -a * r / n  # d(-A r)/dlogp = -A r, token-mean over n
        assert grad[0, t].item() == pytest.approx(want, abs=1e-7), (a, r)
    assert m["clip_frac_high"] == pytest.approx((2 / n) if a > 0 else 0)  # 1.3, 2.0
    assert m["clip_frac_low"] == pytest.approx((2 / n) if a < 0 else 0)  # 0.5, 0.79


def test_ppo_loss_value_matches_loop():
    g = torch.Generator().manual_seed(1)
    old = -torch.rand(3, 5, generator=g)
    logp = old + torch.randn(3, 5, generator=g) * 0.4
    adv = torch.tensor([1.5, -0.7, 0.0])
    mask = torch.tensor([[1.0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    loss, _ = policy_loss("ppo-clip", logp, old, adv, mask, CFG)
    terms = []
    for i in range(3):
        for t in range(5):
            if mask[i, t]:
                r = math.exp(logp[i, t] - old[i, t])
                a = adv[i].item()
                terms.append(max(-a * r, -a * min(max(r, 0.8), 1.28)))
    assert loss.item() == pytest.approx(sum(terms) / len(terms), abs=1e-6)


def test_dual_clip_caps_negative_advantage_loss():
    cfg = replace(CFG, dual_clip=3.0)
    old = torch.full((1, 3), -2.0)
    logp = old + torch.tensor([[2.0, 5.0, 0.5]]).log()
    loss, grad, m = grad_of("ppo-clip", logp, old, torch.tensor([-1.0]), torch.ones(1, 3), cfg)
    assert loss.item() == pytest.approx((2.0 + 3.0 + 0.8) / 3)  # ratio 5 capped at c=3, ratio 0.5 clipped to 0.8
    assert grad[0].tolist() == pytest.approx([2.0 / 3, 0.0, 0.0])
    assert m["dual_clip_frac"] == pytest.approx(1 / 3)


def test_truncated_is_weights_and_metrics():
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    sampler = old - torch.tensor([[0.0, math.log(1.5), math.log(4.0), 9.0]])  # ratios 1, 1.5, 4, (padding)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0])
    plain, g_plain, _ = grad_of("reinforce", old, old, adv, mask)
    cfg = replace(CFG, tis_cap=2.0)
    tis, g_tis, m = grad_of("reinforce", old, old, adv, mask, cfg, sampler_logp=sampler)
    assert tis.item() == pytest.approx(plain.item() * (1 + 1.5 + 2.0) / 3)
    assert g_tis[0].tolist() == pytest.approx((g_plain[0] * torch.tensor([1.0, 1.5, 2.0, 0.0])).tolist())
    assert m["tis_clipped_frac"] == pytest.approx(1 / 3)
    assert m["tis_ratio_mean"] == pytest.approx((1 + 1.5 + 4) / 3)
    assert m["logp_gap_max"] == pytest.approx(math.log(4.0), rel=1e-5)  # padding's gap of 9 is ignored
    off, _, m_off = grad_of("ppo-clip", old, old, adv, mask, CFG, sampler_logp=sampler)  # cap 0: metrics only
    assert off.item() == pytest.approx(-1.0) and m_off["logp_gap_max"] == pytest.approx(math.log(4.0), rel=1e-5)


def test_dpo_matches_formula():
    c, r = torch.tensor([-5.0, -9.0]), torch.tensor([-7.0, -8.0])
    rc, rr = torch.tensor([-6.0, -9.5]), torch.tensor([-6.5, -7.0])
    for beta, ls in [(0.1, 0.0), (0.5, 0.2)]:
        loss, m = dpo_loss(c, r, rc, rr, replace(CFG, dpo_beta=beta, dpo_label_smoothing=ls))
        want = []
        for i in range(2):
            h = beta * ((c[i] - rc[i]) - (r[i] - rr[i])).item()
            sig = 1 / (1 + math.exp(-h))
            want.append(-(1 - ls) * math.log(sig) - ls * math.log(1 - sig))
        assert loss.item() == pytest.approx(sum(want) / 2, rel=1e-6)
    # margins: pair 0 h/beta = 1 - (-0.5) = 1.5 > 0, pair 1 h/beta = 0.5 - (-1) = 1.5 > 0
    assert m["dpo_reward_accuracy"] == 1.0 and m["dpo_reward_margin"] == pytest.approx(0.5 * 1.5)


def test_dpo_nll_adds_the_chosen_sides_per_token_nll_and_its_gradient():
    c = torch.tensor([-5.0, -9.0], requires_grad=True)
    r, rc, rr = torch.tensor([-7.0, -8.0]), torch.tensor([-6.0, -9.5]), torch.tensor([-6.5, -7.0])
    n = torch.tensor([5.0, 3.0])
    plain, _ = dpo_loss(c, r, rc, rr, CFG)
    loss, m = dpo_loss(c, r, rc, rr, replace(CFG, dpo_nll=0.5), chosen_tokens=n)
    assert m["dpo_nll"] == pytest.approx((5 / 5 + 9 / 3) / 2)
    assert loss.item() == pytest.approx(plain.item() + 0.5 * 2.0, rel=1e-6)
    g_plain = torch.autograd.grad(plain, c)[0]
    g = torch.autograd.grad(dpo_loss(c, r, rc, rr, replace(CFG, dpo_nll=0.5), chosen_tokens=n)[0], c)[0]
    assert (g - g_plain).tolist() == pytest.approx([-0.5 / 2 / 5, -0.5 / 2 / 3])  # pushes each chosen up
    with pytest.raises(ValueError, match="chosen_tokens"):
        dpo_loss(c, r, rc, rr, replace(CFG, dpo_nll=0.5))
    from codechat import CodechatError
    from codechat.algos import check_config
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(CodechatError, match=f"dpo_nll must be finite and >= 0, got {bad}"):
            check_config(replace(CFG, dpo_nll=bad))


def test_unknown_loss_and_shape_errors():
    x = torch.zeros(2, 3)
    with pytest.raises(UnknownNameError, match="ppo-clip, reinforce"):
        policy_loss("grpo", x, x, torch.zeros(2), x, CFG)
    with pytest.raises(ValueError, match=r"\(B,\)"):
        policy_loss("ppo-clip", x, x, torch.zeros(3), x, CFG)


@st.composite
def batches(draw):
    B, T = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    fl = st.floats(-60, 60, allow_nan=False, width=32)
    tensor = lambda *shape: torch.tensor(draw(st.lists(fl, min_size=math.prod(shape), max_size=math.prod(shape)))
                                         ).reshape(shape)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T))).reshape(B, T).float()
    if draw(st.booleans()):
        mask[0] = 0  # an all-zero row
    return tensor(B, T), tensor(B, T), tensor(B), mask, tensor(B, T)


@settings(max_examples=60, deadline=None)
@given(batch=batches(), loss_name=st.sampled_from(sorted(POLICY_LOSSES)), agg=st.sampled_from(sorted(AGG_MODES)),
       kl=st.sampled_from(sorted(KL_ESTIMATORS)), tis=st.sampled_from([0.0, 2.0]), dual=st.sampled_from([0.0, 3.0]),
       with_sampler=st.booleans(), corr=st.sampled_from(sorted(CORRECTIONS)))
def test_every_loss_is_finite(batch, loss_name, agg, kl, tis, dual, with_sampler, corr):
    logp, old, adv, mask, sampler = batch
    cfg = replace(CFG, agg=agg, tis_cap=tis, dual_clip=dual, kl_estimator=kl, kl_beta=0.1, agg_norm=8,
                  correction=corr)
    x = logp.clone().requires_grad_(True)
    loss, metrics = policy_loss(loss_name, x, old, adv, mask, cfg, sampler_logp=sampler if with_sampler else None)
    kl_term, _ = kl_loss(x, old, mask, cfg)
    (loss + kl_term).backward()
    assert torch.isfinite(loss) and torch.isfinite(kl_term) and torch.isfinite(x.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())
    assert torch.isfinite(agg_loss(logp, mask, agg))
    P = logp.shape[0]
    d, dm = dpo_loss(logp[:, 0], old[:, 0], sampler[:, 0], adv[:P], cfg)
    assert torch.isfinite(d) and all(math.isfinite(v) for v in dm.values())
