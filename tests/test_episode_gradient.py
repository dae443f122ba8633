"""Where a GRPO update on episodes acts: a passing and a failing episode of one group that share their calls
and tool results up to the fix. Through the trainer's own path (completion_logprobs over the whole transcript,
policy_loss with the episode mask), the shared model tokens get +A and -A in the same context and cancel, and
the tool results are masked: the gradient is that of the differing tokens (the edit's `@new`) alone."""
import pytest
import torch

from codechat.algos import policy_loss
from codechat.config import AlgoConfig
from codechat.policy import completion_logprobs
from policy_helpers import tiny_policy

PROMPT = list(range(10, 22))
SHARED = [40, 41, 42, 43, 44, 45]          # model: read_file, run_tests, the edit's path and @old
RESULT = [60, 61, 62, 63, 64]               # environment: the tool result (masked)
TAIL = {"pass": [70, 71, 72], "fail": [80, 81, 82]}  # model: the edit's @new lines, where the episodes differ


def rows(mask_shared: bool):
    tokens, mask = [], []
    for kind in ("pass", "fail"):
        tokens.append(SHARED[:3] + RESULT + SHARED[3:] + TAIL[kind])
        mask.append([float(mask_shared)] * 3 + [0.0] * len(RESULT) + [float(mask_shared)] * 3 + [1.0] * 3)
    return torch.tensor(tokens), torch.tensor(mask)  # (2, T) each


def grad(model, adv, mask_shared):
    model.zero_grad(set_to_none=True)
    tokens, mask = rows(mask_shared)
    logp = completion_logprobs(model, [PROMPT], torch.zeros(2, dtype=torch.long), tokens, mask)  # (2, T)
    loss, _ = policy_loss("ppo-clip", logp, logp.detach(), torch.tensor(adv), mask, AlgoConfig())
    (loss * mask.sum()).backward()  # undo token-mean's 1 / (masked tokens): compare sums over tokens
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_policy(tmp_path_factory).model.float()


def test_shared_tokens_cancel_and_results_are_masked(model):
    full = grad(model, [1.0, -1.0], mask_shared=True)
    tail = grad(model, [1.0, -1.0], mask_shared=False)
    assert full.abs().max() > 0
    torch.testing.assert_close(full, tail, atol=1e-5, rtol=1e-4)


def test_unbalanced_advantages_do_train_the_shared_tokens(model):
    # the check above can fail: when the advantages do not cancel, the shared tokens move the gradient
    full = grad(model, [1.0, -0.5], mask_shared=True)
    tail = grad(model, [1.0, -0.5], mask_shared=False)
    assert (full - tail).abs().max() > 1e-3 * full.abs().max()
