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


def _expected_grad(estimator: str, logits: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """E_{y ~ pi}[grad_logits k(y)] with the sampled tokens held fixed, as the trainer differentiates the loss:
    each outcome's estimator differentiated through log pi(y), weighted by pi(y) (detached)."""
    logits = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(logits, -1)  # (V,)
    k = kl_penalty(logp[None], ref.log()[None], estimator)[0]  # (V,) one "token" per outcome
    (logp.exp().detach() * k).sum().backward()
    return logits.grad


@pytest.mark.parametrize("seed", range(3))
def test_each_estimator_has_the_documented_gradient(seed):
    """k1 -> 0 (no regularisation); k2 -> grad KL(pi || ref); k3 -> grad KL(ref || pi) (algos/kl.py)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, generator=g, dtype=torch.float64)
    ref = torch.softmax(torch.randn(6, generator=g, dtype=torch.float64), -1)

    def grad_of(f):
        x = logits.clone().requires_grad_(True)
        f(torch.log_softmax(x, -1)).backward()
        return x.grad

    reverse = grad_of(lambda lp: (lp.exp() * (lp - ref.log())).sum())  # grad KL(pi || ref)
    forward = grad_of(lambda lp: (ref * (ref.log() - lp)).sum())  # grad KL(ref || pi)
    assert torch.allclose(_expected_grad("k1", logits, ref), torch.zeros(6, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(_expected_grad("k2", logits, ref), reverse, atol=1e-12)
    assert torch.allclose(_expected_grad("k3", logits, ref), forward, atol=1e-12)
    assert not torch.allclose(reverse, forward, atol=1e-3)  # the two KLs pull differently here


def test_k1_is_refused_as_a_loss_term():
    from codechat import CodechatError
    from codechat.algos import check_config

    with pytest.raises(CodechatError, match="expected gradient of zero"):
        check_config(AlgoConfig(kl_beta=0.1, kl_estimator="k1"))
    check_config(AlgoConfig(kl_beta=0.1, kl_estimator="k2"))
    check_config(AlgoConfig(kl_beta=0.0, kl_estimator="k1"))  # no KL term: nothing to refuse
