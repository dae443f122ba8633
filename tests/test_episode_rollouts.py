"""Episodes -> Rollouts without a model: the loss mask is exactly the model tokens after the prompt (fuzzed over
transcripts), and the episode rewards (tool-calls, protected-edit) read the episode's habits."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat.config import RewardConfig
from codechat.rollout.episode import EpisodeResult, Transcript, Turn
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.train.episodes import episodes_to_rollouts
from codechat.verifier.repo import RepoVerdict

TASK = load_repo_tasks("builtin:repo-train")[0]


def episode(prompt, spans, passed=False, calls=0, protected=0, sample=0):
    """spans: [(is_model, n tokens)] after the prompt."""
    t = Transcript()
    t.append(prompt, False)
    t.prompt_len = len(prompt)
    for k, (model, n) in enumerate(spans):
        ids = [(7 * k + j) % 50 + 3 for j in range(n)]
        t.append(ids, model, [-0.5] * n if model else None)
        if model:
            t.turns.append(Turn(len(t.tokens) - n, len(t.tokens), len(t.tokens), "x", "stop"))
    v = RepoVerdict("passed" if passed else "failed", passed, float(passed))
    return EpisodeResult(TASK.task_id, sample, t, v, False, "", calls, 0, protected, 0, False, {}, 0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), max_size=6), min_size=2, max_size=4))
def test_mask_is_exactly_the_model_tokens(spans_per_episode):
    prompt = [1, 2, 3]
    eps = [episode(prompt, s, sample=i) for i, s in enumerate(spans_per_episode)]
    r = episodes_to_rollouts([TASK], eps, len(eps), 0, None, 4096)
    assert r.prompts == [prompt] and r.batch.prompt_index.tolist() == [0] * len(eps)
    for i, e in enumerate(eps):
        t = e.transcript
        model_at = [j - 3 for j in range(3, len(t.tokens)) if t.is_model[j]]
        n = int(r.batch.n_tokens[i])
        assert n == (model_at[-1] + 1 if model_at else 0)  # trailing tool results are dropped
        assert r.batch.tokens[i, :n].tolist() == t.tokens[3:3 + n]
        assert r.batch.mask[i].nonzero().flatten().tolist() == model_at
        assert torch.equal(r.batch.logprobs[i] != 0, r.batch.mask[i] > 0)  # the sampler's, on model tokens only


def test_different_prompts_in_a_group_are_refused():
    from codechat import CodechatError
    with pytest.raises(CodechatError, match="different prompts"):
        episodes_to_rollouts([TASK], [episode([1, 2], [(True, 2)]), episode([1, 3], [(True, 2)])], 2, 0, None, 99)


def test_tool_call_and_protected_edit_rewards():
    eps = [episode([1], [(True, 2)], passed=True, calls=3, protected=1), episode([1], [(True, 2)], calls=1)]
    cfg = RewardConfig(components={"pass-all": 1.0, "tool-calls": 0.1, "protected-edit": 0.5})
    r = episodes_to_rollouts([TASK], eps, 2, 0, cfg, 99)
    assert r.rewards.tolist() == pytest.approx([1 - 0.3 - 0.5, -0.1])
    assert r.components["tool-calls"].tolist() == pytest.approx([-0.3, -0.1])
    plain = episodes_to_rollouts([TASK], eps, 2, 0, None, 99)  # the default: the hidden-test judgement only
    assert plain.rewards.tolist() == [1.0, 0.0]


def test_audit_flags_passing_episodes_that_touched_tests_or_the_interpreter():
    from codechat.rollout.audit import audit_rollouts
    clean = episode([1], [(True, 2)], passed=True)
    clean.changes = {"toolkit/stats.py": "def f():\n    return 1\n"}
    sneaky = episode([1], [(True, 2)], passed=True, protected=2, sample=1)
    sneaky.changes = {"toolkit/stats.py": "import sys\nclass A:\n    def __eq__(self, o):\n        return True\n"}
    failed = episode([1], [(True, 2)], protected=1, sample=2)  # failed: nothing to explain
    r = episodes_to_rollouts([TASK], [clean, sneaky, failed], 3, 0, None, 99)
    recs = audit_rollouts(r, step=3, top_k=1)
    flagged = [x for x in recs if x["reason"].startswith("suspicious")]
    assert [x["index"] for x in flagged] == [1]
    assert "protected-edit: 2" in flagged[0]["reason"] and "__eq__" in flagged[0]["reason"]
    assert "import sys" in flagged[0]["reason"]
    assert [x["index"] for x in recs if x["reason"] == "top reward"] == [0]
