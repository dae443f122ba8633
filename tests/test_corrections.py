"""Off-policy corrections (tis, seq-is, icepop, seq-tis) and the gspo / cispo losses against slow loop references: values,
gradients, which tokens are dropped; config checks name the field."""
import math
from dataclasses import replace

import pytest
import torch

from codechat import CodechatError
from codechat.algos import CORRECTIONS, UnknownNameError, check_config, policy_loss
from codechat.config import AlgoConfig

CFG = AlgoConfig(clip_low=0.2, clip_high=0.28)


def batch(seed=0, B=3, T=5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 2
    logp = old + torch.randn(B, T, generator=g) * 0.4
    sampler = old + torch.randn(B, T, generator=g) * 0.8
    adv = torch.randn(B, generator=g)
    mask = torch.tensor([[1.0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])[:B, :T]
    return logp, old, sampler, adv, mask


def grad_of(name, logp, old, adv, mask, cfg, **kw):
    x = logp.clone().requires_grad_(True)
    loss, metrics = policy_loss(name, x, old, adv, mask, cfg, **kw)
    loss.backward()
    return loss, x.grad, metrics


def test_seq_is_is_the_capped_geometric_mean_per_sequence():
    _, old, sampler, _, mask = batch()
    cfg = replace(CFG, correction="seq-is", tis_cap=1.5)
    w, m = CORRECTIONS["seq-is"](old, sampler, mask, cfg)
    for i in range(3):
        toks = [t for t in range(5) if mask[i, t]]
        geo = math.exp(sum((old[i, t] - sampler[i, t]).item() for t in toks) / len(toks))
        for t in range(5):
            assert w[i, t].item() == pytest.approx(min(geo, 1.5) if mask[i, t] else 0.0, rel=1e-5)
    assert CORRECTIONS["seq-is"](old, sampler, mask, replace(cfg, tis_cap=0))[0] is None  # cap 0 = off


def test_seq_tis_is_the_capped_product_ratio_per_sequence():
    _, old, sampler, _, mask = batch(2)
    cfg = replace(CFG, correction="seq-tis", tis_cap=1.5)
    w, m = CORRECTIONS["seq-tis"](old, sampler, mask, cfg)
    ratios = []
    for i in range(3):
        toks = [t for t in range(5) if mask[i, t]]
        prod = math.prod(math.exp((old[i, t] - sampler[i, t]).item()) for t in toks)  # pi_old(y) / pi_sampler(y)
        ratios.append(prod)
        for t in range(5):
            assert w[i, t].item() == pytest.approx(min(prod, 1.5) if mask[i, t] else 0.0, rel=1e-5)
    assert any(r > 1.5 for r in ratios) and any(r < 1.0 for r in ratios)  # both sides of the cap are covered
    assert m["seq_ratio_mean"] == pytest.approx(sum(ratios) / 3, rel=1e-5)
    assert CORRECTIONS["seq-tis"](old, sampler, mask, replace(cfg, tis_cap=0))[0] is None  # cap 0 = off
    # the geometric mean (seq-is) of the same tokens differs wherever a sequence has more than one token
    g, _ = CORRECTIONS["seq-is"](old, sampler, mask, replace(cfg, correction="seq-is"))
    assert not torch.allclose(w[:2], g[:2])


def test_icepop_masks_ratios_outside_the_band():
    old = torch.full((1, 5), -1.0)
    ratios = [0.3, 0.5, 1.0, 2.0, 3.0]
    sampler = old - torch.tensor(ratios).log()[None]
    cfg = replace(CFG, correction="icepop", icepop_low=0.5, icepop_high=2.0)
    w, m = CORRECTIONS["icepop"](old, sampler, torch.ones(1, 5), cfg)
    assert w[0].tolist() == pytest.approx([0.0, 0.5, 1.0, 2.0, 0.0], rel=1e-5)
    assert m["tis_clipped_frac"] == pytest.approx(2 / 5)
    # in the loss: the masked tokens get no gradient, the others the ratio-weighted reinforce gradient
    adv = torch.tensor([1.0])
    _, g, _ = grad_of("reinforce", old, old, adv, torch.ones(1, 5), cfg, sampler_logp=sampler)
    assert g[0].tolist() == pytest.approx([-r / 5 if 0.5 <= r <= 2.0 else 0.0 for r in ratios], rel=1e-5)


@pytest.mark.parametrize("name", ["tis", "seq-is", "icepop", "seq-tis"])
def test_every_correction_ignores_padding(name):
    _, old, sampler, _, mask = batch(1)
    noisy = sampler.clone()
    noisy[mask == 0] = 1e4  # garbage under the padding
    cfg = replace(CFG, correction=name, tis_cap=2.0)
    w1, m1 = CORRECTIONS[name](old, sampler, mask, cfg)
    w2, m2 = CORRECTIONS[name](old, noisy, mask, cfg)
    assert torch.equal(w1 * mask, w2 * mask) and m1 == m2


def test_gspo_matches_loop():
    logp, old, _, adv, mask = batch(2)
    cfg = replace(CFG, agg="seq-mean-token-mean")
    loss, grad, m = grad_of("gspo", logp, old, adv, mask, cfg)
    want, n_clip_hi = [], 0
    for i in range(3):
        toks = [t for t in range(5) if mask[i, t]]
        s = math.exp(sum((logp[i, t] - old[i, t]).item() for t in toks) / len(toks))
        a = adv[i].item()
        want.append(max(-a * s, -a * min(max(s, 0.8), 1.28)))
        clipped = (a > 0 and s > 1.28) or (a < 0 and s < 0.8)
        n_clip_hi += a > 0 and s > 1.28
        for t in range(5):  # d/dlogp_t of -A s = -A s / |y|, over 3 sequences
            g = 0.0 if (clipped or not mask[i, t]) else -a * s / len(toks) / 3
            assert grad[i, t].item() == pytest.approx(g, abs=1e-6), (i, t)
    assert loss.item() == pytest.approx(sum(want) / 3, abs=1e-6)
    assert m["clip_frac_high"] == pytest.approx(n_clip_hi / 3)


def test_gspo_clips_a_whole_sequence():
    old = torch.full((1, 4), -1.0)
    logp = old + math.log(1.5)  # every token ratio 1.5 > 1.28: the sequence is clipped for A > 0
    _, g, m = grad_of("gspo", logp, old, torch.tensor([1.0]), torch.ones(1, 4), CFG)
    assert g.abs().max().item() == 0.0 and m["clip_frac_high"] == 1.0
    _, g, _ = grad_of("ppo-clip", logp, old, torch.tensor([-1.0]), torch.ones(1, 4), CFG)
    assert g.abs().max().item() > 0


def test_cispo_matches_loop_and_keeps_gradient_on_clipped_tokens():
    logp, old, _, adv, mask = batch(3)
    loss, grad, m = grad_of("cispo", logp, old, adv, mask, CFG)
    n = int(mask.sum())
    want = 0.0
    for i in range(3):
        for t in range(5):
            if not mask[i, t]:
                assert grad[i, t].item() == 0.0
                continue
            w = min(max(math.exp(logp[i, t] - old[i, t]), 0.8), 1.28)
            want += -w * adv[i].item() * logp[i, t].item()
            assert grad[i, t].item() == pytest.approx(-w * adv[i].item() / n, rel=1e-5)
    assert loss.item() == pytest.approx(want / n, rel=1e-5)
    old1 = torch.full((1, 2), -1.0)  # ratio 2: ppo-clip zeroes the token for A > 0, cispo keeps weight 1.28
    hot = old1 + math.log(2.0)
    _, g_ppo, _ = grad_of("ppo-clip", hot, old1, torch.tensor([1.0]), torch.ones(1, 2), CFG)
    _, g_cis, _ = grad_of("cispo", hot, old1, torch.tensor([1.0]), torch.ones(1, 2), CFG)
    assert g_ppo.abs().max().item() == 0.0 and g_cis[0].tolist() == pytest.approx([-1.28 / 2] * 2)


def test_losses_apply_the_configured_correction():
    logp, old, sampler, adv, mask = batch(4)
    out = {}
    for name in ["tis", "seq-is", "icepop", "seq-tis"]:
        cfg = replace(CFG, correction=name, tis_cap=1.2)
        out[name] = policy_loss("cispo", logp, old, adv, mask, cfg, sampler_logp=sampler)[0].item()
    assert len({round(v, 6) for v in out.values()}) == 4  # four different weightings


def test_config_checks_name_the_field():
    with pytest.raises(UnknownNameError, match="icepop, seq-is, seq-tis, tis"):
        check_config(replace(CFG, correction="vtrace"))
    with pytest.raises(CodechatError, match="icepop_low"):
        check_config(replace(CFG, icepop_low=1.5))
    check_config(replace(CFG, loss="gspo", correction="icepop"))
