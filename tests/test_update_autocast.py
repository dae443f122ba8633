"""rl.autocast_bf16: the update's forwards under bf16 autocast (policy/precision.py) against the exact fp32 update:
off by default and then a no-op; on, log-probs and weight updates within bf16 tolerance of fp32's (but not equal:
the setting has an effect), the fast path still agrees with the reference path, and the config parses."""
import pytest
import torch
from test_dedup_train import close, config, rollouts, update, vocab

from codechat import CodechatError
from codechat.config import RLConfig
from codechat.config.io import load_config
from codechat.policy import completion_logprobs, load_policy
from codechat.policy import precision
from codechat.policy.precision import bf16_native, update_autocast
from codechat.train import train


def batch(n_vocab: int):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, n_vocab, (4 + i,), generator=g).tolist() for i in range(3)]
    idx = torch.tensor([0, 0, 1, 1, 2, 2])
    tokens = torch.randint(3, n_vocab, (6, 7), generator=g)  # (N, T)
    mask = (torch.arange(7)[None] < torch.tensor([7, 3, 5, 7, 1, 6])[:, None]).float()  # (N, T)
    return prompts, idx, tokens, mask


def test_off_by_default_is_a_no_op():
    assert RLConfig().autocast_bf16 is False
    with update_autocast(False, "cpu"):
        assert not torch.is_autocast_enabled("cpu")
    with update_autocast(True, torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_logprobs_close_to_fp32_fast_and_reference_agree():
    model = load_policy(config().model).model
    prompts, idx, tokens, mask = batch(model.config.vocab_size)
    exact = completion_logprobs(model, prompts, idx, tokens, mask)  # (N, T) fp32
    with update_autocast(True, "cpu"):
        fast = completion_logprobs(model, prompts, idx, tokens, mask, fast=None)
        ref = completion_logprobs(model, prompts, idx, tokens, mask, fast=False)
    assert fast.dtype == torch.float32 and torch.isfinite(fast).all()
    assert ((fast != 0) == (mask > 0)).all()
    assert 0 < (fast - exact).abs().max() < 0.05  # bf16 GEMMs: an effect, within bf16 tolerance
    assert (fast - ref).abs().max() < 0.05  # both paths under autocast (HF's attention in bf16, ours in fp32)


def test_gradients_close_to_fp32():
    model = load_policy(config().model).model
    prompts, idx, tokens, mask = batch(model.config.vocab_size)
    grads = []
    for on in (False, True):
        model.zero_grad()
        with update_autocast(on, "cpu"):
            lp = completion_logprobs(model, prompts, idx, tokens, mask)
        (lp * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    rel = ((grads[0] - grads[1]).norm() / grads[0].norm()).item()
    assert 0 < rel < 0.05, rel


@pytest.mark.skipif(not bf16_native("cpu"), reason="no native bf16 on this CPU: the setting is refused here")
@pytest.mark.parametrize("epochs,minibatch_size", [(1, 8)])  # 2 steps: the second needs the no-grad pi_old pass
def test_rl_update_close_to_fp32(tmp_path, epochs, minibatch_size):
    r = rollouts(vocab())
    exact, m_exact = update(r, config(epochs=epochs, minibatch_size=minibatch_size), tmp_path)
    lowp, m_lowp = update(r, config(epochs=epochs, minibatch_size=minibatch_size, autocast_bf16=True), tmp_path)
    close(lowp, exact, rel=0.05)  # something was learned, and about what fp32 learns
    assert any((lowp[k] != exact[k]).any() for k in exact)  # the setting is in effect
    assert m_lowp.keys() == m_exact.keys()
    assert m_lowp["loss"] == pytest.approx(m_exact["loss"], rel=0.05, abs=1e-3)


def test_config_parses_and_rejects_bad_value():
    assert load_config(None, ["rl.autocast_bf16=true"]).rl.autocast_bf16 is True
    with pytest.raises(CodechatError, match="autocast_bf16"):
        load_config(None, ["rl.autocast_bf16=maybe"])


def test_refused_where_bf16_is_not_native(tmp_path, monkeypatch):
    """On a CPU without AVX512-bf16/AMX the run stops in one line before it claims its directory."""
    monkeypatch.setattr(precision, "bf16_native", lambda device: False)
    precision.check_autocast(False, "cpu")  # off: never refused
    run = tmp_path / "run"
    cfg = load_config(None, ["rl.autocast_bf16=true", "data.train=builtin:toy", "stages=[grpo]", "model.device=cpu",
                             f"run_dir={run}"])
    with pytest.raises(CodechatError, match=r"rl.autocast_bf16=true: cpu has no native bf16") as e:
        train(cfg)
    assert "\n" not in str(e.value) and not run.exists()
    monkeypatch.setattr(precision, "bf16_native", lambda device: True)
    precision.check_autocast(True, "cpu")  # native: allowed
