"""pi_old without a separate pass for the first optimizer step (train/rl.py `old_logprobs`): every policy-loss
call of an update gets the old log-probs that a no-grad pass of the weights before the update gives on its rows
(the simple reference), while the no-grad pass runs only over the rows after the first step."""
import copy

import pytest
import torch

from codechat.train import dist, rl
from test_dedup_train import G, P, config, rollouts, update, vocab


def reference_old(cfg, r) -> torch.Tensor:
    """The simple reference: a no-grad pass of the preset's starting weights over every row, before any step."""
    from codechat.policy import load_policy

    torch.manual_seed(0)
    model = load_policy(cfg.model).model
    model.train()
    return rl.frozen_logprobs(model, r, torch.arange(len(r.rewards)), cfg.sampling.temperature)  # (N, T)


@pytest.mark.parametrize("epochs,minibatch_size,grad_accum,dedup", [
    (2, 0, 1, False),  # one minibatch per epoch: no no-grad pass at all
    (2, 0, 2, True),  # ... with accumulation: each micro-batch of the first step fills its rows
    (2, 7, 2, False),  # minibatches: the no-grad pass covers the rows after the first step
    (3, 5, 1, True),
    (1, 6, 1, True)])  # one epoch of minibatches: later minibatches read the pre-update log-probs too
def test_old_logprobs_equal_a_separate_pass(tmp_path, monkeypatch, epochs, minibatch_size, grad_accum, dedup):
    r = rollouts(vocab())
    cfg = config(epochs=epochs, minibatch_size=minibatch_size, grad_accum=grad_accum, dedup=dedup)
    want = reference_old(cfg, r)  # (N, T)
    calls = []
    real_loss = rl.policy_loss

    def spy(name, logp, old_logp, adv, mask, a, **kw):
        calls.append((logp.detach().clone(), old_logp.clone(), mask.clone()))
        return real_loss(name, logp, old_logp, adv, mask, a, **kw)

    monkeypatch.setattr(rl, "policy_loss", spy)
    seen = []
    delta, _ = update(r, cfg, tmp_path, seen)
    plan = dist.minibatch_plan(P * G, minibatch_size, epochs, seed=7)  # update()'s step_seed(7)
    assert any(v.abs().max() > 0 for v in delta.values()), "nothing was learned"
    rows_in = [m.shape[0] for _, _, m in calls]
    assert sum(rows_in) == sum(len(p) for p in plan)
    got = torch.cat([o for _, o, _ in calls])  # (sum n, T) in the order of the plan's micro-batches
    order = torch.cat([mb for mb in plan])  # the same rows, in the same order
    assert (got - want[order]).abs().max().item() < 1e-5  # every step: the weights before the update
    moved = [(o - lp).abs().max().item() for lp, o, _ in calls[len(calls) // 2:]]
    if len(plan) > 1:
        assert max(moved) > 1e-4  # later steps do see new weights: old_logp is not just logp again
    no_grad = len(plan[0]) < P * G
    # forward passes: the reference, the no-grad pass over the rows after the first step (if any), each micro-batch
    assert len(seen) == 1 + no_grad + len(calls)


def test_old_logprobs_seed_matches_the_trainer():
    """The test above rebuilds rl_update's plan from seed 7: a fresh TrainState's step_seed(7) is 7."""
    from codechat.train.checkpoint import TrainState
    from codechat.train.common import Context

    ctx = Context(config(), None, None, None, None, TrainState(), None, [])
    assert ctx.step_seed(7) == 7
