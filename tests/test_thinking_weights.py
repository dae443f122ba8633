"""The balanced-sampling estimator (rollout/thinking.py): the stratified importance weights against an
enumeration (forced paths only, and with a free share that reaches the openings off both paths), the weighted
re-centring against a loop and its effect on tokens no sample chose, the free share of each group, and the
Lagrange reference averaged over the first steps, and the bonus withheld from malformed openings."""
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat.config import RewardConfig, ThinkingConfig
from codechat.config.io import ConfigError, load_config
from codechat.policy import SampleBatch
from codechat.rollout.collect import Rollouts
from codechat.rollout.thinking import MALFORMED, BalancedSampler, ForcedBatch, NothinkConstraint, drop_malformed_bonus, \
    is_weights, penalise_malformed, recenter, well_formed
from codechat.train.thinking import ThinkingHooks


# --- the weights against an enumeration -------------------------------------------------------------------------
def _enumerate(counts, support):
    """Slow reference: a two-token policy, y1 in {0 empty block, 1 open tag, 2 neither} (the opening), y2 in {0, 1}.
    The stratified proposal draws k samples with y1 = 0, m with y1 = 1, u from pi; summing, over every sequence,
    q(y) w(y) R(y) grad log pi(y) (w detached) must equal grad sum_{y1 in support} pi(y) R(y)."""
    torch.manual_seed(0)
    theta = torch.randn(3, requires_grad=True)  # opening logits
    phi = torch.randn(3, 2, requires_grad=True)  # second-token logits given the opening
    R = torch.tensor([[1.0, 0.0], [0.3, 0.9], [0.2, 0.6]])  # reward of (y1, y2)
    lp1, lp2 = torch.log_softmax(theta, 0), torch.log_softmax(phi, 1)
    logpi = lp1[:, None] + lp2  # (3, 2)
    exact = torch.autograd.grad((logpi.exp() * R)[support].sum(), [theta, phi], retain_graph=True)
    k, m, u = counts
    n = k + m + u
    seqs = [(a, b) for a in support for b in range(2)]
    logp = torch.stack([torch.stack([lp1[a], lp2[a, b]]) for a, b in seqs])  # (S, 2) per-token log-probs
    path = torch.tensor([a for a, _ in seqs])  # (S,)
    plen = torch.tensor([0 if a == 2 else 1 for a, _ in seqs])  # the opening off both paths has no prefix
    w = is_weights(logp, plen, path, counts)  # (S,)
    share = {0: k / n, 1: m / n, 2: 0.0}
    q = torch.tensor([(share[a] + u / n * lp1[a].exp().item()) * lp2[a, b].exp().item() for a, b in seqs])
    rew = torch.tensor([R[a, b].item() for a, b in seqs])
    est = torch.autograd.grad((q * w * rew * logp.sum(1)).sum(), [theta, phi], retain_graph=True)
    unweighted = torch.autograd.grad((q * rew * logp.sum(1)).sum(), [theta, phi])
    return exact, est, unweighted


@pytest.mark.parametrize("counts,support", [((3, 7, 0), [0, 1]), ((1, 3, 0), [0, 1]), ((2, 4, 2), [0, 1, 2]),
                                            ((3, 4, 1), [0, 1, 2])])
def test_stratified_weighted_gradient_equals_the_policys_own_enumerated(counts, support):
    """Forced paths only: exact over the two paths (the policy's gradient given an opening on them); with a free
    share: exact over every opening, the malformed ones included."""
    exact, est, unweighted = _enumerate(counts, support)
    for e, x in zip(est, exact):
        assert torch.allclose(e, x, atol=1e-6)
    assert not torch.allclose(unweighted[0], exact[0], atol=1e-3)  # without w: biased


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 4), st.integers(0, 4), st.integers(0, 3), st.integers(1, 6), st.integers(0, 10 ** 6))
def test_is_weights_match_a_per_sample_loop(k, m, u, N, seed):
    if k + m == 0:
        k = 1
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(N, 5, generator=g) * 3  # (N, T)
    allowed = [p for p, c in ((0, k), (1, m), (2, u)) if c or (u and p < 2)]
    path = torch.tensor([allowed[int(i)] for i in torch.randint(len(allowed), (N,), generator=g)])  # (N,)
    plen = torch.where(path == 2, 0, torch.randint(1, 5, (N,), generator=g))  # (N,)
    w = is_weights(logp, plen, path, (k, m, u))  # (N,)
    n = k + m + u
    for i in range(N):
        pi = math.exp(sum(logp[i, t].item() for t in range(int(plen[i]))))
        q = ({0: k, 1: m, 2: 0}[int(path[i])] + u * pi) / n
        assert math.isclose(w[i].item(), pi / q, rel_tol=1e-5)
    assert torch.allclose(w[path == 2], torch.tensor(n / max(u, 1)))


# --- the weighted re-centring -----------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-3, 3), st.floats(0.01, 5)), min_size=1, max_size=12))
def test_recenter_matches_a_loop_and_each_groups_weighted_sum_is_zero(rows):
    groups = torch.tensor([g for g, _, _ in rows])
    adv = torch.tensor([a for _, a, _ in rows], dtype=torch.float64)
    w = torch.tensor([x for _, _, x in rows], dtype=torch.float64)
    out = recenter(adv, w, groups)  # (N,)
    for i, (g, a, x) in enumerate(rows):
        same = [j for j, r in enumerate(rows) if r[0] == g]
        base = sum(rows[j][1] * rows[j][2] for j in same) / sum(rows[j][2] for j in same)
        assert math.isclose(out[i].item(), x * (a - base), rel_tol=1e-9, abs_tol=1e-9)
    for g in set(groups.tolist()):
        assert abs(out[groups == g].sum().item()) < 1e-9


def test_recentred_advantages_leave_unchosen_opening_tokens_alone():
    """The mechanism of the malformed openings: at the choice position (shared by a group) a forced no-think
    sample chose token 0, a forced think sample token 1; tokens 2-3 were never sampled. Floored weights (1 and ~2)
    times plain group advantages sum to != 0 and push the unchosen tokens' logits; re-centred, they get none."""
    z = torch.tensor([-3.0, 2.0, -1.0, -1.5], requires_grad=True)  # logits after the shared `<think`
    chosen = torch.tensor([0, 0, 1, 1])  # (N,) two no-think, two think samples of one group
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])  # no-think passed with the bonus: group-normalised
    w = torch.tensor([1.0, 1.0, 1.9, 1.9])  # the floor lifts the no-think weights to 1; think ~ 2 pi(think)
    groups = torch.zeros(4, dtype=torch.long)

    def grad(a):
        return torch.autograd.grad((a * torch.log_softmax(z, 0)[chosen]).sum(), z)[0]  # ascent direction

    plain = grad(w * adv)
    assert plain[2] > 0.05 and plain[3] > 0.05  # the never-sampled openings gain
    fixed = grad(recenter(adv, w, groups))
    assert torch.allclose(fixed[2:], torch.zeros(2), atol=1e-6)
    assert fixed[0] > 0 > fixed[1]  # the choice itself still moves toward the better mode


# --- the free share ---------------------------------------------------------------------------------------------
class CharTok:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}


class ScriptedEngine:
    """Free samples (prompts without a forced prefix) answer with the next scripted text; forced ones with `ok`."""
    samples_training_weights = True

    def __init__(self, free_texts):
        self.free_texts, self.calls = list(free_texts), []

    def sample(self, prompts, n, cfg):
        self.calls.append(n)
        texts = [self.free_texts.pop(0) if p[-1] == 0 else "ok" for p in prompts for _ in range(n)]
        T = max(len(t) for t in texts)
        tokens = torch.zeros(len(texts), T, dtype=torch.long)
        for i, t in enumerate(texts):
            tokens[i, :len(t)] = torch.tensor([ord(c) for c in t])
        return SampleBatch(torch.arange(len(prompts)).repeat_interleave(n), tokens, (tokens != 0).float(),
                           torch.full(tokens.shape, -0.5), ["stop"] * len(texts), texts,
                           torch.tensor([len(t) for t in texts]))


def test_free_share_is_sampled_unforced_and_its_openings_classified():
    eng = ScriptedEngine(["<a></a>x", "<a>p</a>x", "<ax></a>x"])
    cfg = ThinkingConfig(enabled=True, open="<a>", close="</a>", forced_nothink_frac=0.5, free_frac=0.3)
    s = BalancedSampler(eng, CharTok(), cfg)
    assert s.split(10) == (4, 3, 3) and s.split(4) == (2, 1, 1) and s.split(1) == (0, 1, 0)  # one forced at least
    b = s.sample([[0]], 10, None)  # one group: 4 forced empty, 3 forced open, 3 free
    assert b.counts == (4, 3, 3) and eng.calls == [4, 3, 3]
    assert b.free.tolist() == [False] * 7 + [True] * 3
    assert b.path.tolist() == [0] * 4 + [1] * 3 + [0, 1, 2] and b.prefix_len.tolist()[7:] == [7, 3, 0]
    assert b.forced_nothink.tolist() == [True] * 4 + [False] * 6  # a free sample on the empty path is not forced
    assert b.texts[7:] == ["<a></a>x", "<a>p</a>x", "<ax></a>x"]
    assert b.mask[7, 0] == 1 and b.mask[0, :3].sum() == 0  # free: every token learned; forced: `<a` not
    assert b.logprobs[0, 0].item() == pytest.approx(math.log(4 / 10)) and b.logprobs[4, 0].item() == pytest.approx(math.log(3 / 10))
    assert b.logprobs[7, 0].item() == -0.5  # free: the engine's own log-probs
    whole = BalancedSampler(ScriptedEngine(["<a></a>x", "<a>p</a>x", "<ax></a>x"]), CharTok(),
                            ThinkingConfig(enabled=True, open="<a>", close="</a>", forced_nothink_frac=0.5,
                                           free_frac=0.3, mask_forced=True)).sample([[0]], 10, None)
    assert whole.mask[0, :7].sum() == 0 and whole.mask[0, 7] == 1  # the whole forced `<a></a>`: no gradient
    assert whole.mask[4, :3].sum() == 0 and whole.mask[4, 3] == 1 and whole.mask[7, 0] == 1
    assert b.mask[0, 3] == 1  # default: the forced empty block past the shared `<a>` is learned


def _hooks(floor, free):
    cfg = load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5",
                             f"verifier.thinking.is_weight_floor={floor}", f"verifier.thinking.free_frac={free}"])
    ctx = SimpleNamespace(cfg=cfg, policy=SimpleNamespace(tokenizer=None), state=SimpleNamespace(extra={}),
                          eval_tasks=[])
    return ThinkingHooks(ctx)


def test_weigh_floors_then_recentres_and_logs_the_off_path_share():
    # one group of 4: forced empty (pi 1e-4), forced open (pi 0.9), free open (pi 0.9), free off both paths
    logp = torch.log(torch.tensor([[1e-4, 1.0], [0.9, 1.0], [0.9, 1.0], [0.5, 1.0]]))  # (4, 2)
    batch = ForcedBatch(torch.zeros(4, dtype=torch.long), torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 2),
                        torch.zeros(4, 2), ["stop"] * 4, ["<think></think>a", "<think>b", "<think>c", " <thinkd"],
                        torch.tensor([2] * 4),
                        forced_nothink=torch.tensor([True, False, False, False]),
                        prefix_len=torch.tensor([1, 1, 1, 0]), path=torch.tensor([0, 1, 1, 2]),
                        free=torch.tensor([False, False, True, True]), counts=(1, 1, 2))
    r = Rollouts([], [[1]], batch, [None] * 4, torch.zeros(4), {})
    adv = torch.tensor([1.0, -0.5, 0.5, -1.0])
    seen = []

    def logprobs(rr, rows):  # the hook asks for every real token's log-prob, the loss-masked forced ones too
        seen.append(rr.batch.mask.clone())
        return logp

    batch.mask[0, 0] = 0.0  # a masked shared token
    out, m = _hooks(1.0, 0.5).weigh(r, adv, logprobs)
    assert seen[0].tolist() == [[1.0, 1.0]] * 4 and batch.mask[0, 0] == 0  # the batch itself is left as it was
    w = is_weights(logp, batch.prefix_len, batch.path, batch.counts).clamp(min=1.0)
    assert w.tolist() == pytest.approx([1.0, 0.9 / ((1 + 1.8) / 4), 0.9 / ((1 + 1.8) / 4), 2.0])
    assert torch.allclose(out, recenter(adv, w, torch.zeros(4, dtype=torch.long))) and abs(out.sum()) < 1e-6
    assert m["thinking/malformed_frac"] == 0.5  # of the free samples: `<think>c` is well formed, ` <thinkd` not
    assert m["thinking/offpath_frac"] == 0.5 and m["thinking/policy_nothink_p"] == pytest.approx(1e-4)
    assert m["thinking/is_weight_floored"] == 0.25
    with pytest.raises(ConfigError, match="is_weight_floor: expected >= 0"):
        _hooks(-1, 0.0)
    with pytest.raises(ConfigError, match="needs forced_nothink_frac > 0"):
        load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.is_weight_floor=0.5"])
    with pytest.raises(ConfigError, match="free_frac: expected in"):
        _hooks(1.0, 1.0)
    with pytest.raises(ConfigError, match="free_frac > 0 needs forced_nothink_frac"):
        load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.free_frac=0.2"])


# --- the Lagrange reference ---------------------------------------------------------------------------------------
def _step(c, pass_t):
    r = SimpleNamespace(components={"nothink-bonus": torch.tensor([0.3, 0.0])}, rewards=torch.tensor([1.3, 1.0]),
                        passed=torch.tensor([True, True]))
    return c.apply(r, pass_t)


def test_lagrange_reference_is_the_mean_of_the_first_steps():
    c = NothinkConstraint(RewardConfig(nothink_margin=0.05, nothink_lr=1.0, nothink_ref_steps=3))
    for p in (0.3, 0.1, 0.2):  # one lucky batch (0.3) no longer sets the bound alone
        m = _step(c, p)
        assert m["thinking/lambda"] == 0.0  # held while the reference is averaged
    assert c.ref_pass == pytest.approx(0.2) and c.ref_n == 3
    assert _step(c, 0.1)["thinking/lambda"] == pytest.approx(0.05)  # 0.2 - 0.05 - 0.1
    c2 = NothinkConstraint(RewardConfig(nothink_ref_steps=3))
    c2.load_state_dict(c.state_dict())
    assert (c2.lam, c2.ref_pass, c2.ref_n) == (c.lam, c.ref_pass, 3)
    one = NothinkConstraint(RewardConfig(nothink_margin=0.05, nothink_lr=1.0))  # default 1: the first step's
    _step(one, 0.3)
    assert one.ref_pass == 0.3 and _step(one, 0.1)["thinking/lambda"] == pytest.approx(0.15)
    with pytest.raises(ConfigError, match="nothink_ref_steps: expected >= 1"):
        load_config(None, ["rewards.nothink_ref_steps=0"])


# --- malformed openings earn no bonus -----------------------------------------------------------------------------
def test_malformed_openings_lose_the_nothink_bonus():
    """Measured (docs/results/thinking-runs.md): the RL model's free samples drifted to `<thinkX think>code`, which
    the split reads as no thinking (no tag is complete), so it earned the bonus: the no-think share rose through them."""
    texts = ["<think></think>a", " <think></think>b", "</think>c", "<thinkXthink>\nd", "e", "<think>plan</think>f"]
    bonus = torch.tensor([0.3, 0.3, 0.3, 0.3, 0.3, 0.0])
    r = SimpleNamespace(batch=SimpleNamespace(texts=texts), components={"nothink-bonus": bonus.clone()},
                        rewards=torch.tensor([1.3, 0.3, 1.3, 1.3, 0.3, 1.0]))
    assert [well_formed(t, ThinkingConfig(enabled=True)) for t in texts] == [True, True, True, False, False, True]
    assert drop_malformed_bonus(r, ThinkingConfig(enabled=True)) == pytest.approx(2 / 6)
    assert torch.allclose(r.rewards, torch.tensor([1.3, 0.3, 1.3, 1.0, 0.0, 1.0]))
    assert r.components["nothink-bonus"].tolist() == pytest.approx([0.3, 0.3, 0.3, 0.0, 0.0, 0.0])
    none = SimpleNamespace(batch=SimpleNamespace(texts=["e"]), components={}, rewards=torch.tensor([0.0]))
    assert drop_malformed_bonus(none, ThinkingConfig(enabled=True)) == 0.0 and none.rewards.tolist() == [0.0]


def test_a_malformed_opening_scores_below_a_clean_failed_answer():
    """Withholding the bonus (above) left mangled tags at a clean failure's reward; the penalty puts them below."""
    texts = ["<think></think>a", "<thinkXthink>\nd", "e", "<think>plan</think>f"]
    r = SimpleNamespace(batch=SimpleNamespace(texts=texts), components={}, rewards=torch.tensor([0.0, 0.0, 1.0, 1.0]))
    assert penalise_malformed(r, ThinkingConfig(enabled=True), 0.2) == pytest.approx(2 / 4)
    assert torch.allclose(r.rewards, torch.tensor([0.0, -0.2, 0.8, 1.0]))
    assert r.components[MALFORMED].tolist() == pytest.approx([0.0, -0.2, -0.2, 0.0])


def test_the_malformed_penalty_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="malformed_opening_penalty > 0 needs verifier.thinking.enabled"):
        load_config(None, ["rewards.malformed_opening_penalty=0.1"])
    with pytest.raises(ConfigError, match="malformed_opening_penalty: expected >= 0"):
        load_config(None, ["verifier.thinking.enabled=true", "rewards.malformed_opening_penalty=-1"])


def test_the_rl_hooks_apply_the_malformed_penalty_after_the_bonus_rules():
    cfg = load_config(None, ["verifier.thinking.enabled=true", "rewards.components={pass-all: 1.0, nothink-bonus: 0.3}",
                             "rewards.malformed_opening_penalty=0.2"])
    ctx = SimpleNamespace(cfg=cfg, policy=SimpleNamespace(tokenizer=lambda t, **k: {"input_ids": t.split()}),
                          state=SimpleNamespace(extra={}), eval_tasks=[])
    texts = ["<think></think>a", "<thinkXthink>\nd", "<think>plan</think>f"]
    batch = SampleBatch(torch.zeros(3, dtype=torch.long), torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 2),
                        torch.zeros(3, 2), ["stop"] * 3, texts, torch.tensor([2] * 3))
    verdicts = [SimpleNamespace(thought=t, passed=False) for t in (False, False, True)]
    r = Rollouts([], [[1]], batch, verdicts, torch.tensor([0.3, 0.3, 0.0]),
                 {"pass-all": torch.zeros(3), "nothink-bonus": torch.tensor([0.3, 0.3, 0.0])})
    m = ThinkingHooks(ctx).after_sample(r)
    assert m["thinking/malformed_penalised"] == pytest.approx(1 / 3)
    assert r.rewards.tolist() == pytest.approx([0.3, -0.2, 0.0])  # the mangled tag: no bonus, and below 0
    off = SimpleNamespace(cfg=load_config(None, ["verifier.thinking.enabled=true"]), policy=ctx.policy,
                          state=SimpleNamespace(extra={}), eval_tasks=[])
    r2 = Rollouts([], [[1]], batch, verdicts, torch.zeros(3), {"pass-all": torch.zeros(3)})
    assert "thinking/malformed_penalised" not in ThinkingHooks(off).after_sample(r2) and r2.rewards.tolist() == [0] * 3
