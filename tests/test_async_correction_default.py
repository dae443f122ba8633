"""Asynchronous rollouts are corrected by default: with rl.async_steps > 0 and algo.tis_cap unset, the RL stages
cap the importance weight pi_old / pi_behaviour at 2 (decoupled PPO), so a stale batch is not trained as if it
were on policy; the synchronous loop keeps the correction off, and an explicit cap (0 included) is kept."""
import torch

from codechat.algos import policy_loss
from codechat.config.io import load_config
from codechat.train.rl import ASYNC_TIS_CAP, stage_algo


def algo(*overrides):
    return stage_algo(load_config(None, list(overrides)), "grpo")


def test_an_unset_cap_is_on_under_async_and_off_on_policy():
    assert algo("rl.async_steps=1").tis_cap == ASYNC_TIS_CAP == 2.0
    assert algo("rl.async_steps=2", "algo.correction=seq-tis").tis_cap == ASYNC_TIS_CAP
    assert algo().tis_cap == 0.0
    assert algo("rl.async_steps=1", "algo.tis_cap=0").tis_cap == 0.0  # asked off: off
    assert algo("algo.tis_cap=3").tis_cap == 3.0
    assert load_config(None, ["rl.async_steps=1"]).algo.tis_cap is None  # the run's config is left as it is


def test_a_stale_batch_is_weighted_by_its_capped_ratio_under_the_async_default():
    torch.manual_seed(0)
    logp = torch.randn(4, 6) - 2.0  # (B, T) the trainer's
    behaviour = logp - torch.tensor([2.0, 0.5, 0.0, -1.0])[:, None]  # the older weights: ratios e^2, e^.5, 1, e^-1
    mask, adv = torch.ones(4, 6), torch.tensor([1.0, -1.0, 1.0, -1.0])
    on = algo("rl.async_steps=1", "algo.loss=reinforce")
    off = algo("rl.async_steps=1", "algo.loss=reinforce", "algo.tis_cap=0")
    loss_on, met = policy_loss("reinforce", logp, logp, adv, mask, on, sampler_logp=behaviour)
    loss_off, _ = policy_loss("reinforce", logp, logp, adv, mask, off, sampler_logp=behaviour)
    assert met["tis_clipped_frac"] == 0.25  # the first row's e^2 is capped at 2
    w = torch.tensor([2.0, 0.5, 0.0, -1.0]).exp().clamp(max=2.0)
    assert not torch.isclose(loss_on, loss_off)
    # reinforce: the token-mean of -A * w * logp, w = the capped ratio of the token's row
    assert torch.isclose(loss_on / loss_off, (adv * w * (-logp.mean(1))).sum() / (adv * (-logp.mean(1))).sum(),
                         rtol=1e-4), (loss_on, loss_off)
