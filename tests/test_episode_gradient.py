"""Where a GRPO update on episodes acts, through the trainer's own path: the rows and loss mask that
`episodes_to_rollouts` builds from the transcripts, `completion_logprobs` over the whole transcript and
`policy_loss` with that mask.

- One episode alone (nothing to cancel against): its gradient is exactly A times the gradient of the log-probs of
  its model tokens; the tool result's tokens, though attended to, add nothing. Were they in the loss mask, the
  gradient would differ (checked: it does when the mask is all ones).
- A passing and a failing episode of one group that share their calls and tool result up to the fix: the shared
  model tokens get +A and -A in the same context and cancel, so the gradient is that of the differing tokens
  (the edit's `@new`) alone; with unbalanced advantages they do not cancel."""
import pytest
import torch

from codechat.algos import policy_loss
from codechat.config import AlgoConfig
from codechat.policy import completion_logprobs
from codechat.rollout.episode import EpisodeResult, Transcript, Turn
from codechat.train.episodes import episodes_to_rollouts
from codechat.verifier.repo import RepoVerdict
from policy_helpers import tiny_policy
from tests.test_episode_rollouts import TASK

PROMPT = list(range(10, 22))
SHARED = [40, 41, 42, 43, 44, 45]          # model: read_file, run_tests, the edit's path and @old
RESULT = [60, 61, 62, 63, 64]               # environment: the tool result
TAIL = {"pass": [70, 71, 72], "fail": [80, 81, 82]}  # model: the edit's @new lines, where the episodes differ
MODEL_AT = [0, 1, 2, 8, 9, 10, 11, 12, 13]  # positions of the model's tokens in a row (after the prompt)


def episode(kind: str, sample: int) -> EpisodeResult:
    """Model turn, tool result, model turn: the transcript the sampler and the tools would leave."""
    t = Transcript()
    t.append(PROMPT, False)
    t.prompt_len = len(PROMPT)
    for ids, model in ((SHARED[:3], True), (RESULT, False), (SHARED[3:] + TAIL[kind], True)):
        t.append(ids, model, [-0.5] * len(ids) if model else None)
        if model:
            t.turns.append(Turn(len(t.tokens) - len(ids), len(t.tokens), len(t.tokens), "x", "stop"))
    passed = kind == "pass"
    v = RepoVerdict("passed" if passed else "failed", passed, float(passed))
    return EpisodeResult(TASK.task_id, sample, t, v, False, "", 2, 0, 0, 0, False, {}, 0.0)


def batch(kinds):
    r = episodes_to_rollouts([TASK], [episode(k, i) for i, k in enumerate(kinds)], len(kinds), 0, None, 4096)
    return r.batch.tokens, r.batch.mask  # (N, T) each: the trainer's rows and loss mask


def loss_grad(model, tokens, mask, adv):
    model.zero_grad(set_to_none=True)
    logp = completion_logprobs(model, [PROMPT], torch.zeros(len(tokens), dtype=torch.long), tokens, mask)  # (N, T)
    loss, _ = policy_loss("ppo-clip", logp, logp.detach(), torch.tensor(adv), mask, AlgoConfig())
    (loss * mask.sum()).backward()  # undo token-mean's 1 / (masked tokens): compare sums over tokens
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def logp_grad(model, tokens, positions, coef):
    """coef times the gradient of the summed log-probs at `positions` of the single row `tokens`."""
    model.zero_grad(set_to_none=True)
    ones = torch.ones(tokens.shape)
    logp = completion_logprobs(model, [PROMPT], torch.zeros(1, dtype=torch.long), tokens, ones)  # (1, T)
    (coef * logp[0, positions].sum()).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_policy(tmp_path_factory).model.float()


def test_one_episodes_gradient_is_its_model_tokens_alone(model):
    tokens, mask = batch(["pass"])
    assert mask[0].nonzero().flatten().tolist() == MODEL_AT
    got = loss_grad(model, tokens, mask, [1.0])
    want = logp_grad(model, tokens, MODEL_AT, -1.0)  # ppo-clip at ratio 1: -A d log pi, model tokens only
    assert want.abs().max() > 0
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    with_results = loss_grad(model, tokens, torch.ones_like(mask), [1.0])  # what a mask that trains results gives
    assert (with_results - want).abs().max() > 1e-3 * want.abs().max()


def test_shared_tokens_cancel_between_a_passing_and_a_failing_episode(model):
    tokens, mask = batch(["pass", "fail"])
    full = loss_grad(model, tokens, mask, [1.0, -1.0])
    tail = torch.zeros_like(mask)
    tail[:, -3:] = 1.0  # the differing @new tokens only
    only_tail = loss_grad(model, tokens, tail, [1.0, -1.0])
    assert full.abs().max() > 0
    torch.testing.assert_close(full, only_tail, atol=1e-5, rtol=1e-4)
    # the check can fail: when the advantages do not cancel, the shared tokens move the gradient
    full = loss_grad(model, tokens, mask, [1.0, -0.5])
    only_tail = loss_grad(model, tokens, tail, [1.0, -0.5])
    assert (full - only_tail).abs().max() > 1e-3 * full.abs().max()
