"""KV kept across turns (policy/prefix.py): the cached path samples what a full re-prefill samples."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codechat import CodechatError
from codechat.config import AgentConfig, SamplingConfig
from codechat.policy.prefix import common_prefix
from codechat.policy.sampler import Sampler
from codechat.rollout.agents import ModelAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.tasks.repo import RepoLimits
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.verifier.repo import RepoJudge
from policy_helpers import tiny_policy

CFG = SamplingConfig(temperature=1.0, max_new_tokens=10, seed=3)


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    return tiny_policy(tmp_path_factory)


def grow(ctx, batch, extra):
    """Each context + its sample + some 'environment' ids."""
    return [c + batch.tokens[i, :int(batch.n_tokens[i])].tolist() + e for i, (c, e) in enumerate(zip(ctx, extra))]


def test_cached_turns_equal_full_prefill(pol):
    g = torch.Generator().manual_seed(0)
    rnd = lambda n: torch.randint(5, 1000, (n,), generator=g).tolist()  # noqa: E731
    ctx = [rnd(n) for n in (30, 52, 41)]
    full, cached = Sampler(pol), Sampler(pol)
    for turn in range(4):
        a = full.sample(ctx, 1, CFG)
        b = cached.sample(ctx, 1, CFG, keys=["x", "y", "z"])
        assert torch.equal(a.tokens, b.tokens) and a.texts == b.texts and a.finish_reason == b.finish_reason
        assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
        if turn:  # everything but the last sampled token and the appended ids came from the store
            assert cached.prefix.reused_tokens > 0
        ctx = grow(ctx, a, [rnd(5 + i) for i in range(3)])
    assert cached.prefix.prefilled_tokens < full.prefix.prefilled_tokens / 2


def test_edited_context_reuses_only_the_common_prefix(pol):
    s, ref = Sampler(pol), Sampler(pol)
    ctx = [list(range(10, 60))]
    b = s.sample(ctx, 1, CFG, keys=[0])
    edited = [ctx[0][:20] + [7, 7, 7] + ctx[0][20:] + b.tokens[0].tolist()]  # ids changed in the middle
    before = s.prefix.reused_tokens
    out = s.sample(edited, 1, CFG, keys=[0])
    assert s.prefix.reused_tokens - before == 20
    want = ref.sample(edited, 1, CFG)
    assert torch.equal(out.tokens, want.tokens) and torch.allclose(out.logprobs, want.logprobs, atol=1e-5)


def test_store_dropped_when_weights_change(pol):
    s = Sampler(pol)
    ctx = [list(range(10, 60))]
    b = s.sample(ctx, 1, CFG, keys=[0])
    with torch.no_grad():
        w = pol.model.get_input_embeddings().weight
        w.add_(0.0)  # an in-place write: what an optimizer step does
    before = s.prefix.reused_tokens
    s.sample([ctx[0] + b.tokens[0].tolist()], 1, CFG, keys=[0])
    assert s.prefix.reused_tokens == before  # nothing reused: the stored KV may be stale


def test_only_keys_of_the_last_call_are_kept(pol):
    s = Sampler(pol)
    s.sample([[11, 12, 13], [14, 15]], 1, CFG, keys=["a", "b"])
    s.sample([[11, 12, 13, 9]], 1, CFG, keys=["a"])
    assert set(s.prefix.entries) == {"a"}
    with pytest.raises(CodechatError, match="keys"):
        s.sample([[1, 2], [3, 4]], 1, CFG, keys=["a", "a"])
    with pytest.raises(CodechatError, match="keys"):
        s.sample([[1, 2]], 2, CFG, keys=["a"])


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 25), st.integers(0, 3)), min_size=1, max_size=3),
       st.integers(0, 2**16))
def test_fuzz_growing_and_cut_contexts(pol, shapes, seed):
    """Random lengths, appended ids, and contexts cut back before the stored end: always the full path's tokens."""
    g = torch.Generator().manual_seed(seed)
    ctx = [torch.randint(5, 1000, (n,), generator=g).tolist() for n, _ in shapes]
    keys = list(range(len(ctx)))
    full, cached = Sampler(pol), Sampler(pol)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=seed)
    for turn in range(3):
        a, b = full.sample(ctx, 1, cfg), cached.sample(ctx, 1, cfg, keys=keys)
        assert torch.equal(a.tokens, b.tokens) and torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
        ctx = grow(ctx, a, [torch.randint(5, 1000, (k,), generator=g).tolist() for _, k in shapes])
        ctx = [c[:max(1, len(c) - cut)] for c, (_, cut) in zip(ctx, shapes)]  # cut: a turn budget's cut


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([1, 2, 3], [1, 5, 3]) == 1
    assert common_prefix([], [1]) == 0 and common_prefix([4], [5]) == 0


def test_episodes_with_and_without_kv_reuse_are_the_same(pol):
    """agent.kv_reuse: the same transcripts token for token, log-probs to rounding, fewer prefilled tokens."""
    tasks = generate_repo_tasks("train", 2, seed=1)
    for t in tasks:
        t.limits = RepoLimits(max_turns=3, max_tokens=100_000)
    runs = {}
    with RepoJudge() as judge:
        for reuse in (False, True):
            sampler = Sampler(pol)
            agent = ModelAgent(pol, SamplingConfig(temperature=1.0), sampler=sampler)
            cfg = AgentConfig(turn_tokens=8, kv_reuse=reuse)
            runs[reuse] = (EpisodeRunner(agent, judge, cfg).run([(t, g) for t in tasks for g in range(2)], seed=4),
                           sampler.prefix)
    (off, p_off), (on, p_on) = runs[False], runs[True]
    for a, b in zip(off, on):
        assert a.transcript.tokens == b.transcript.tokens and a.transcript.is_model == b.transcript.is_model
        assert len(a.transcript.turns) == 3
        assert max(abs(x - y) for x, y in zip(a.transcript.logprobs, b.transcript.logprobs)) < 1e-5
    assert p_off.reused_tokens == 0 and p_on.reused_tokens > 0
    assert p_on.entries == {}  # the ended episodes' KV is released with the run
    assert p_on.prefilled_tokens < p_off.prefilled_tokens / 2
