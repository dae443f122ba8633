"""Balanced sampling through the sampler's own labelling (rollout/thinking.py): on tokenizers whose tags are one
token each, several tokens, or merged across the boundary, every sequence the stratified proposal can draw gets
the weight pi(y) / q(y), so the weighted estimate of each outcome equals the policy's own probability."""
import hashlib
import math

import pytest
import torch

from codechat.config import ThinkingConfig
from codechat.policy import SampleBatch
from codechat.rollout.thinking import BalancedSampler, is_weights

EOS, PROMPT = 0, 1


class PieceTok:
    """Greedy longest-match over a piece list; piece i is id i + 2 (0 EOS, 1 the prompt)."""

    def __init__(self, pieces):
        self.pieces = sorted(pieces, key=len, reverse=True)
        self.id = {p: i + 2 for i, p in enumerate(pieces)}

    def __call__(self, text, add_special_tokens=False):
        ids, i = [], 0
        while i < len(text):
            piece = next(p for p in self.pieces if text.startswith(p, i))
            ids.append(self.id[piece])
            i += len(piece)
        return {"input_ids": ids}


class ToyPolicy:
    """pi(next | prefix): the next token of either tag where the prefix is on its way, or `x` / `y` (an answer,
    then EOS); logits fixed by a hash of the prefix."""

    def __init__(self, tags, x, y):
        self.tags, self.x, self.y = tags, x, y

    def next_probs(self, prefix):
        if prefix and prefix[-1] in (self.x, self.y, EOS):
            return {EOS: 1.0}
        cands = sorted({t[len(prefix)] for t in self.tags if len(t) > len(prefix) and t[:len(prefix)] == prefix}
                       | {self.x, self.y})
        h = hashlib.sha256(repr(prefix).encode()).digest()
        logits = torch.tensor([h[i] / 64.0 for i in range(len(cands))])
        return dict(zip(cands, torch.softmax(logits, 0).tolist()))

    def logp(self, seq):
        return [math.log(self.next_probs(seq[:i])[t]) for i, t in enumerate(seq)]

    def completions(self, prefix):
        """Every (continuation ending with EOS, pi(continuation | prefix))."""
        out = []
        for t, p in self.next_probs(prefix).items():
            if t == EOS:
                out.append(([EOS], p))
            else:
                out += [([t] + c, p * q) for c, q in self.completions(prefix + [t])]
        return out


class PlannedEngine:
    """Answers a prompt `[PROMPT] + forced prefix` with the continuation planned for that prefix."""
    samples_training_weights = True

    def __init__(self):
        self.plan = {}

    def sample(self, prompts, n, cfg):
        conts = [self.plan[tuple(p[1:])] for p in prompts for _ in range(n)]
        T = max(len(c) for c in conts)
        tokens = torch.zeros(len(conts), T, dtype=torch.long)
        for i, c in enumerate(conts):
            tokens[i, :len(c)] = torch.tensor(c)
        n_tok = torch.tensor([len(c) for c in conts])
        return SampleBatch(torch.arange(len(prompts)).repeat_interleave(n), tokens,
                           (torch.arange(T)[None] < n_tok[:, None]).float(), torch.zeros(len(conts), T),
                           ["stop"] * len(conts), [""] * len(conts), n_tok)


TOKENIZERS = {  # name -> pieces
    "single-token tags": ["<think>", "</think>", "x", "y"],
    "multi-token tags": ["<", "think", ">", "</", "x", "y"],
    "merged across the boundary": ["<", "think", ">", "></", "</", "x", "y"],
}


def enumerate_outcomes(pieces, free_frac, group=8):
    """-> {outcome: (estimated, exact)} over the three openings, and the per-sequence check of w = pi / q."""
    tok = PieceTok(pieces)
    cfg = ThinkingConfig(enabled=True, open="<think>", close="</think>", forced_nothink_frac=0.5, free_frac=free_frac)
    eng = PlannedEngine()
    s = BalancedSampler(eng, tok, cfg)
    x, y = tok.id["x"], tok.id["y"]
    pol = ToyPolicy([s.nothink_ids, s.think_ids], x, y)
    k, m, u = s.split(group)
    strata = [(k, s.nothink_ids), (m, s.think_ids), (u, [])]
    row0 = {0: 0, 1: k, 2: k + m}  # the first row of each stratum in a group
    est, mass = {}, {}  # sequence -> weighted proposal mass, policy mass

    def outcome(seq):
        text = "".join(next(p for p, i in tok.id.items() if i == t) for t in seq if t != EOS)
        return "empty" if text.startswith("<think></think>") else "think" if text.startswith("<think>") else "off"

    for si, (count, forced) in enumerate(strata):
        if not count:
            continue
        for cont, p in pol.completions(list(forced)):
            for f in (s.nothink_ids, s.think_ids, []):  # the other strata answer anything on their support
                eng.plan[tuple(f)] = cont if list(f) == list(forced) else pol.completions(list(f))[0][0]
            b = s.sample([[PROMPT]], group, None)
            r = row0[si]
            seq = b.tokens[r, :int(b.n_tokens[r])].tolist()
            assert seq == list(forced) + cont
            logp = torch.zeros(1, len(seq))
            logp[0] = torch.tensor(pol.logp(seq))
            w = is_weights(logp, b.prefix_len[r:r + 1], b.path[r:r + 1], b.counts, b.nested_len).item()
            est[tuple(seq)] = est.get(tuple(seq), 0.0) + count / group * p * w
            mass[tuple(seq)] = math.exp(sum(pol.logp(seq)))
    per_outcome = {}
    for seq, e in est.items():
        o = outcome(list(seq))
        a, b_ = per_outcome.get(o, (0.0, 0.0))
        per_outcome[o] = (a + e, b_ + mass[seq])
    return per_outcome, est, mass


@pytest.mark.parametrize("name", list(TOKENIZERS))
@pytest.mark.parametrize("free_frac", [0.0, 0.25])
def test_every_sequence_the_balanced_sampler_draws_is_weighted_to_the_policys_probability(name, free_frac):
    per_outcome, est, mass = enumerate_outcomes(TOKENIZERS[name], free_frac)
    for seq in est:
        assert est[seq] == pytest.approx(mass[seq], rel=1e-6), (name, seq)
    e, p = per_outcome["empty"]
    assert e == pytest.approx(p, rel=1e-6)  # the no-think outcome at the policy's own probability
    if free_frac > 0:  # the free share reaches every opening: the whole distribution
        assert sum(e for e, _ in per_outcome.values()) == pytest.approx(1.0, rel=1e-6)


def test_single_token_tags_nest_the_open_tag_in_the_empty_block():
    s = BalancedSampler(PlannedEngine(), PieceTok(TOKENIZERS["single-token tags"]),
                        ThinkingConfig(enabled=True, forced_nothink_frac=0.5))
    assert s.think_ids == s.nothink_ids[:1] and s.nested_len == 1
    merged = BalancedSampler(PlannedEngine(), PieceTok(TOKENIZERS["merged across the boundary"]),
                             ThinkingConfig(enabled=True, forced_nothink_frac=0.5))
    assert merged.nested_len == 0  # `></` splits the paths: disjoint


def test_forced_tokens_stay_out_of_the_off_policy_correction():
    """A balanced batch's forced tokens were drawn by no sampler; pi_old gives the forced empty block ~1e-3."""
    from codechat.algos.corrections import CORRECTIONS
    from codechat.config import AlgoConfig
    from codechat.rollout.thinking import behaviour_logprobs

    tok = PieceTok(TOKENIZERS["single-token tags"])
    eng = PlannedEngine()
    s = BalancedSampler(eng, tok, ThinkingConfig(enabled=True, forced_nothink_frac=0.5))
    x = tok.id["x"]
    eng.plan = {tuple(s.nothink_ids): [x, EOS], tuple(s.think_ids): [tok.id["y"], EOS]}
    b = s.sample([[PROMPT]], 4, None)  # 2 forced empty, 2 forced open
    assert b.forced.tolist() == [[True, True, False, False]] * 2 + [[True, False, False, False]] * 2
    old = torch.full(b.mask.shape, -0.5)  # (N, T) pi_old's log-probs; the forced `</think>` ~1e-3
    old[:2, 1] = math.log(1e-3)
    rows = torch.arange(4)
    beh = behaviour_logprobs(b, rows, b.logprobs, old)
    assert torch.equal(beh[b.forced], old[b.forced]) and torch.equal(beh[~b.forced], b.logprobs[~b.forced])
    for name in ("icepop", "tis"):
        w, met = CORRECTIONS[name](old, beh, b.mask, AlgoConfig(tis_cap=2.0))
        assert met["logp_gap_max"] == pytest.approx(0.5)  # only the sampled tokens' gap (engine 0 vs -0.5)
        assert (w[b.forced & (b.mask > 0)] == 1).all()  # the learned forced `</think>` keeps its full weight
    assert torch.equal(behaviour_logprobs(SampleBatch(*[None] * 7), rows, b.logprobs, old), b.logprobs)


def test_lagrange_multiplier_rises_when_the_policys_pass_rate_falls_under_balanced_sampling():
    """The policy almost always thinks (pi(empty) = 0.01); a balanced group is half forced no-think. Its think
    answers fall from 9/10 to 3/10 passing while the forced no-think ones rise from 3/10 to 9/10: the batch's
    plain pass rate stays 0.6, the policy's falls from ~0.89 to ~0.31."""
    from types import SimpleNamespace

    from codechat.config.io import load_config
    from codechat.rollout.collect import Rollouts
    from codechat.rollout.thinking import ForcedBatch
    from codechat.train.thinking import ThinkingHooks

    cfg = load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5",
                             "rewards.components={pass-all: 1.0, nothink-bonus: 0.3}", "rewards.nothink_lr=1.0",
                             "rewards.nothink_margin=0.05"])
    ctx = SimpleNamespace(cfg=cfg, policy=SimpleNamespace(tokenizer=lambda t, **k: {"input_ids": t.split()}),
                          state=SimpleNamespace(extra={}), eval_tasks=[])
    hooks = ThinkingHooks(ctx)
    N = 20  # one group: 10 forced empty block (single-token tags: `<think>` `</think>`), 10 forced open tag
    logp = torch.log(torch.tensor([[1.0, 0.01]] * 10 + [[1.0, 0.99]] * 10))  # (N, 2)
    texts = ["<think></think>a"] * 10 + ["<think>plan</think>b"] * 10
    lams, policy_pass = [], []
    for think_pass, empty_pass in ((9, 3), (3, 9)):
        passed = [i < empty_pass for i in range(10)] + [i < think_pass for i in range(10)]
        batch = ForcedBatch(torch.zeros(N, dtype=torch.long), torch.zeros(N, 2, dtype=torch.long), torch.ones(N, 2),
                            torch.zeros(N, 2), ["stop"] * N, texts, torch.tensor([2] * N),
                            forced_nothink=torch.arange(N) < 10, prefix_len=torch.tensor([2] * 10 + [1] * 10),
                            path=torch.tensor([0] * 10 + [1] * 10), free=torch.zeros(N, dtype=torch.bool),
                            counts=(10, 10, 0), nested_len=1)
        verdicts = [SimpleNamespace(thought=i >= 10, passed=p) for i, p in enumerate(passed)]
        bonus = torch.tensor([0.3] * 10 + [0.0] * 10)
        r = Rollouts([], [[1]], batch, verdicts, torch.tensor(passed, dtype=torch.float) + bonus,
                     {"pass-all": torch.tensor(passed, dtype=torch.float), "nothink-bonus": bonus})
        assert r.passed.float().mean().item() == pytest.approx(0.6)  # the balanced batch's rate: unchanged
        m = hooks.after_sample(r, lambda rr, rows: logp)
        lams.append(m["thinking/lambda"])
        policy_pass.append(m["thinking/policy_pass"])
    assert policy_pass == pytest.approx([0.894, 0.306], abs=2e-3)
    assert lams[0] == 0.0 and lams[1] == pytest.approx(0.894 - 0.05 - 0.306, abs=3e-3)  # the constraint acts
