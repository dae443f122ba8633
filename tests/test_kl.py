"""k1/k2/k3 against exact KL(pi || ref) on small categorical distributions."""
import pytest
import torch

from codechat.algos import KL_ESTIMATORS, UnknownNameError, kl_loss, kl_penalty
from codechat.config import AlgoConfig

PI = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)  # the policy: samples come from it
REF = torch.tensor([0.4, 0.35, 0.2, 0.05], dtype=torch.float64)
EXACT_KL = (PI * (PI / REF).log()).sum().item()  # KL(pi || ref) = sum pi log(pi/ref)


def per_token(estimator):
    """The estimator at every outcome of the 4-way categorical, as a (1, 4) row of 'tokens'."""
    return kl_penalty(PI.log()[None], REF.log()[None], estimator)[0]


def test_k1_and_k3_are_exact_in_expectation():
    assert (PI * per_token("k1")).sum().item() == pytest.approx(EXACT_KL, rel=1e-12)
    assert (PI * per_token("k3")).sum().item() == pytest.approx(EXACT_KL, rel=1e-12)


def test_k2_hand_computed_and_close_to_kl_for_close_distributions():
    log_r = (REF / PI).log()
    assert (PI * per_token("k2")).sum().item() == pytest.approx((PI * 0.5 * log_r**2).sum().item(), rel=1e-12)
    assert (PI * per_token("k2")).sum().item() == pytest.approx(EXACT_KL, rel=0.1)  # second order agreement


def test_sampled_estimates_converge_and_k3_is_nonnegative():
    g = torch.Generator().manual_seed(0)
    ys = torch.multinomial(PI, 200_000, replacement=True, generator=g)  # samples from the policy
    logp, ref = PI.log()[ys][None], REF.log()[ys][None]  # (1, N)
    for name in ("k1", "k3"):
        assert kl_penalty(logp, ref, name).mean().item() == pytest.approx(EXACT_KL, abs=2e-3)
    x = torch.randn(1000, dtype=torch.float64) * 5
    assert (kl_penalty(x[None], torch.randn(1000, dtype=torch.float64)[None] * 5, "k3") >= 0).all()
    assert (kl_penalty(torch.zeros(1, 3), torch.zeros(1, 3), "k3") == 0).all()


def test_k3_finite_for_extreme_log_ratios():
    out = kl_penalty(torch.tensor([[0.0, -500.0]]), torch.tensor([[-500.0, 0.0]]), "k3")
    assert torch.isfinite(out).all()


def test_kl_loss_scales_by_beta_and_ignores_padding():
    cfg = AlgoConfig(kl_beta=0.5, kl_estimator="k1", agg="token-mean")
    logp = torch.tensor([[-1.0, -2.0, float("nan")]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, 3.0]])
    loss, metrics = kl_loss(logp, ref, torch.tensor([[1.0, 1.0, 0.0]]), cfg)
    assert loss.item() == pytest.approx(0.5 * (0.5 - 1.0) / 2)
    assert metrics["kl"] == pytest.approx(-0.25)
    loss.backward()
    assert torch.equal(logp.grad, torch.tensor([[0.25, 0.25, 0.0]]))


def test_unknown_estimator():
    with pytest.raises(UnknownNameError, match="k1, k2, k3"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3"]
