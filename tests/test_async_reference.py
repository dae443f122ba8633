"""rl.async_steps=1 against a simple reference with a moving policy: the synchronous loop whose engine samples with
the weights one update behind the trainer's (version s - 1 at step s >= 1, version 0 at step 0). The producer
thread must give that run's samples, losses, gradient norms and IS metrics exactly: no torn or mixed weights, no
batch trained twice or skipped, the optimizer, schedule and seeds consumed as in the synchronous loop. And the
PPO ratio is taken against the trainer's weights before the update (the proximal policy, decoupled PPO), while
the IS weight corrects from the behaviour policy to it: with one optimizer step per update the ratio is exactly 1
on stale batches whose behaviour log-probs differ from the trainer's."""
import copy
import dataclasses

import pytest

import codechat.train.rl as rl
from codechat.policy.sampler import Sampler
from codechat.train.producer import weights_snapshot
from test_async_rl import by_step, run

ALGO = ["rl.steps=4", "algo.loss=ppo-clip", "algo.clip_high=0.28", "algo.correction=tis", "seed=1"]
KEYS = ("loss", "pg_loss", "grad_norm", "pass_rate", "tis_ratio_mean", "tis_ratio_max", "logp_gap_max",
        "ratio_mean", "zero_var_frac", "adv_abs_mean", "lr")


class OneUpdateBehind:
    """A rollout engine holding its own model copy, refreshed one push late: after update s it loads the weights
    pushed after update s - 1."""

    samples_training_weights = False

    def __init__(self, policy):
        self.policy = dataclasses.replace(policy, model=copy.deepcopy(policy.model).eval())
        self.sampler = Sampler(self.policy)
        self.pending = weights_snapshot(policy.model)  # version 0

    def sample(self, *args, **kwargs):
        return self.sampler.sample(*args, **kwargs)

    def update_weights(self, model) -> None:
        self.policy.model.load_state_dict(self.pending)
        self.pending = weights_snapshot(model)

    def release_kv(self) -> None:
        self.sampler.release_kv()

    def close(self) -> None:
        pass


@pytest.mark.slow  # ~10-20 s: two 4-step runs; the one test of the producer against a moving-policy reference
def test_async_equals_the_synchronous_loop_sampling_one_update_behind(tmp_path, monkeypatch):
    _, a_rolls, a_m = run(tmp_path, "async", *ALGO, "rl.async_steps=1")
    monkeypatch.setattr(rl, "make_engine", lambda policy, *a: OneUpdateBehind(policy))
    _, r_rolls, r_m = run(tmp_path, "reference", *ALGO)
    assert by_step(a_rolls) == by_step(r_rolls)
    for k in KEYS:
        assert [m.get(k) for m in a_m] == [m.get(k) for m in r_m], k
    # the policy moved and the stale batches saw it: otherwise the comparison says nothing about versions
    stale = [m for m in a_m[2:] if m.get("logp_gap_max", 0.0) > 1e-2]
    assert stale, [m.get("logp_gap_max") for m in a_m]
    for m in stale:  # pi_old is the trainer's weights (one optimizer step: ratio 1), not the behaviour policy's
        assert abs(m["ratio_mean"] - 1.0) < 1e-6 and m["clip_frac_low"] == m["clip_frac_high"] == 0.0
        assert abs(m["tis_ratio_mean"] - 1.0) > 1e-4 or m["tis_ratio_max"] > 1.01  # ... which IS corrects from
