"""The sampler: shapes, seeds, stops and EOS, truncation, and agreement with the trainer's log-probs."""
import pytest
import torch

from codechat import CodechatError
from codechat.config import SamplingConfig
from codechat.policy import Sampler, completion_logprobs
from codechat.policy.sampler import cut_at_stop, process_logits
from codechat.policy.stops import StopChecker
from policy_helpers import pol, prompts  # noqa: F401 - fixtures (the tiny policy, PROMPT_TEXTS encoded)


def test_shapes_and_invariants(pol, prompts):
    b = Sampler(pol).sample(prompts, 4, SamplingConfig(max_new_tokens=9, seed=1))
    N = 12
    assert b.prompt_index.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert b.tokens.shape == b.mask.shape == b.logprobs.shape == (N, 9)
    assert b.tokens.dtype == torch.long and b.n_tokens.tolist() == b.mask.sum(1).long().tolist()
    assert (b.tokens[b.mask == 0] == pol.tokenizer.pad_token_id).all()
    assert (b.logprobs[b.mask == 1] < 0).all() and (b.logprobs[b.mask == 0] == 0).all()
    assert len(b.texts) == len(b.finish_reason) == N
    for i in range(N):
        if b.finish_reason[i] == "length":
            assert b.n_tokens[i] == 9
            assert b.texts[i] == pol.decode(b.tokens[i, : b.n_tokens[i]])


def test_same_seed_same_tokens_other_seed_other_tokens(pol, prompts):
    cfg = SamplingConfig(max_new_tokens=12, seed=7, top_p=0.9, top_k=50, temperature=0.8)
    a = Sampler(pol).sample(prompts, 3, cfg)
    b = Sampler(pol).sample(prompts, 3, cfg)
    c = Sampler(pol).sample(prompts, 3, SamplingConfig(**{**cfg.__dict__, "seed": 8}))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.tokens, c.tokens)
    assert len({tuple(t) for t in a.tokens[:3].tolist()}) > 1  # a prompt's samples differ


def test_fast_path_matches_transformers_forward(pol, prompts):
    cfg = SamplingConfig(max_new_tokens=10, seed=3)
    fast = Sampler(pol).sample(prompts, 2, cfg)
    slow = Sampler(pol, fast=False).sample(prompts, 2, cfg)
    assert torch.equal(fast.tokens, slow.tokens)
    assert (fast.logprobs - slow.logprobs).abs().max() < 1e-4


def test_sampler_logprobs_agree_with_trainer(pol, prompts):
    b = Sampler(pol).sample(prompts, 3, SamplingConfig(max_new_tokens=16, seed=0))
    for fast in (None, False):
        lp = completion_logprobs(pol.model, prompts, b.prompt_index, b.tokens, b.mask, fast=fast)
        assert (lp - b.logprobs).abs().max() < 1e-4


def test_temperature_logprobs_are_of_the_tempered_distribution(pol, prompts):
    b = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=8, temperature=0.7, seed=0))
    with torch.no_grad():
        lp = completion_logprobs(pol.model, prompts, b.prompt_index, b.tokens, b.mask, temperature=0.7)
    assert (lp - b.logprobs).abs().max() < 1e-4


def test_greedy_and_top_k_1_agree(pol, prompts):
    g = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=8, temperature=0.0, seed=0))
    k = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=8, top_k=1, seed=5))
    assert torch.equal(g.tokens, k.tokens)
    assert torch.equal(g.tokens[0], g.tokens[1])  # greedy: the n samples of a prompt are equal
    assert (k.logprobs == 0).all()  # a one-token distribution
    lp = completion_logprobs(pol.model, prompts, g.prompt_index, g.tokens, g.mask)  # greedy records T=1
    assert (lp - g.logprobs).abs().max() < 1e-4


def test_top_p_and_top_k_against_brute_force():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0, 5.0]])
    for top_p in (0.3, 0.6, 0.8, 0.95, 1.0):
        for top_k in (0, 2, 3):
            lp = process_logits(logits, SamplingConfig(top_p=top_p, top_k=top_k))
            for row in range(2):
                order = logits[row].argsort(descending=True).tolist()
                kth = logits[row, order[top_k - 1]] if top_k else -float("inf")
                keep = [i for i in order if logits[row, i] >= kth]  # ties with the k-th are kept, as in HF
                probs = torch.softmax(logits[row, keep], 0)
                n = int((probs.cumsum(0) - probs < top_p).sum())  # smallest prefix reaching top_p
                kept = keep[:n]
                want = torch.full((5,), float("-inf"))
                want[kept] = torch.log_softmax(logits[row, kept], 0)
                assert torch.allclose(lp[row], want), (top_p, top_k, row)


def test_eos_ends_samples_early_and_batches_shrink(pol, prompts):
    eos = tuple(range(100, 300))  # ~20% of the vocabulary counts as EOS: samples end at various steps
    early = type(pol)(**{**pol.__dict__, "eos_token_ids": eos})
    cfg = SamplingConfig(max_new_tokens=30, seed=2)
    b = Sampler(early).sample(prompts, 4, cfg)
    keep_all = Sampler(early, compact_every=2.0).sample(prompts, 4, cfg)  # never drop finished rows
    assert torch.equal(b.tokens, keep_all.tokens)  # tokens do not depend on batching
    assert len(set(b.n_tokens.tolist())) > 2
    for i in range(b.tokens.shape[0]):
        n = int(b.n_tokens[i])
        toks = b.tokens[i, :n].tolist()
        if b.finish_reason[i] == "stop":
            assert toks[-1] in eos and not set(toks[:-1]) & set(eos)
        else:
            assert n == 30 and not set(toks) & set(eos)
    lp = completion_logprobs(pol.model, prompts, b.prompt_index, b.tokens, b.mask)
    assert (lp - b.logprobs).abs().max() < 1e-4


@pytest.mark.parametrize("byte_level", [True, False])
def test_stop_strings(pol, prompts, byte_level):
    s = Sampler(pol)
    if not byte_level:
        s.stops = StopChecker(pol.tokenizer)
        s.stops._table = None  # force the decode-everything fallback
    stops = ["e", "\n"]
    b = s.sample(prompts, 4, SamplingConfig(max_new_tokens=40, stop=stops, seed=4))
    assert b.finish_reason.count("stop") >= 10
    for i in range(b.tokens.shape[0]):
        n = int(b.n_tokens[i])
        full, before = pol.decode(b.tokens[i, :n]), pol.decode(b.tokens[i, : n - 1])
        if b.finish_reason[i] == "stop":
            assert any(x in full for x in stops) and not any(x in before for x in stops)
            assert b.texts[i] == cut_at_stop(full, stops) and b.texts[i].endswith(tuple(stops))
            assert not any(x in b.texts[i][:-1] for x in stops)
        else:
            assert not any(x in full for x in stops)


def test_cut_at_stop():
    assert cut_at_stop("abc\ndef g", ["\ndef", "g"]) == "abc\ndef"
    assert cut_at_stop("abc", ["x"]) == "abc"


def test_one_token_and_bad_inputs(pol, prompts):
    b = Sampler(pol).sample(prompts[:1], 2, SamplingConfig(max_new_tokens=1))
    assert b.tokens.shape == (2, 1) and b.n_tokens.tolist() == [1, 1]
    for i in range(2):  # one token: 'stop' exactly when it is an EOS id, else cut by the length limit
        assert b.finish_reason[i] == ("stop" if int(b.tokens[i, 0]) in pol.eos_token_ids else "length")
    forced = Sampler(pol).sample(prompts[:1], 2, SamplingConfig(max_new_tokens=1, temperature=0.0))
    greedy_tok = int(forced.tokens[0, 0])
    assert forced.finish_reason == ["stop" if greedy_tok in pol.eos_token_ids else "length"] * 2
    with pytest.raises(CodechatError):
        Sampler(pol).sample([[]], 2, SamplingConfig())
    with pytest.raises(CodechatError, match="top_p"):
        Sampler(pol).sample(prompts, 2, SamplingConfig(top_p=0.0))


def test_fast_logprobs_match_reference_in_values_and_gradients(pol, prompts):
    torch.manual_seed(0)
    idx = torch.tensor([0, 0, 1, 2, 2, 2])
    tokens = torch.randint(4, 1000, (6, 7))
    mask = torch.ones(6, 7)
    mask[1, 4:] = 0
    mask[3, 1:] = 0
    tokens[mask == 0] = pol.tokenizer.pad_token_id
    params = [p for p in pol.model.parameters() if p.requires_grad]
    out = {}
    for fast in (True, False):
        pol.model.zero_grad()
        logp, ent = completion_logprobs(pol.model, prompts, idx, tokens, mask, temperature=0.9, with_entropy=True,
                                        fast=fast)
        (logp.sum() + 0.1 * ent.sum()).backward()
        out[fast] = (logp.detach(), ent.detach(), [p.grad.clone() for p in params])
    (a, ea, ga), (b, eb, gb) = out[True], out[False]
    assert (a - b).abs().max() < 1e-4 and (ea - eb).abs().max() < 1e-4
    assert (a[mask == 0] == 0).all() and (ea[mask == 0] == 0).all()
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, atol=1e-4, rtol=1e-3)
    pol.model.zero_grad()


def test_fast_path_is_active_for_presets(pol):
    from codechat.policy.fastlm import FastLM, usable

    assert usable(pol.model)  # matches the model's own forward
    assert FastLM(pol.model).fuse()  # q/k/v and gate/up concatenated for decoding


def test_loss_mask_holes_do_not_change_other_logprobs(pol, prompts):
    b = Sampler(pol).sample(prompts[:2], 2, SamplingConfig(max_new_tokens=10, seed=1))
    holes = b.mask.clone()
    holes[:, 2] = 0  # e.g. a token excluded from the loss
    for fast in (None, False):
        lp = completion_logprobs(pol.model, prompts[:2], b.prompt_index, b.tokens, holes, fast=fast)
        assert (lp[:, 2] == 0).all()
        assert (lp - b.logprobs * holes).abs().max() < 1e-4


def test_logprobs_of_a_minibatch_of_rows(pol, prompts):
    b = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=6, seed=2))
    rows = torch.tensor([5, 1, 4])  # prompts 2, 0, 2: prompt 1 is not used
    lp = completion_logprobs(pol.model, prompts, b.prompt_index[rows], b.tokens[rows], b.mask[rows])
    assert (lp - b.logprobs[rows]).abs().max() < 1e-4


def test_choose_never_picks_a_zero_probability_token():
    from codechat.policy.sampler import choose

    logits = torch.tensor([[0.0, 1.0, float("-inf"), float("-inf")], [float("-inf"), 2.0, 0.5, float("-inf")]])
    u = torch.tensor([1.0 - 1e-12, 0.0]).float()  # rounds to 1.0 in float32: the top edge of the CDF
    cfg = SamplingConfig()
    for uu in (u, torch.zeros(2), torch.full((2,), 0.999999), torch.rand(2)):
        tok, logp = choose(logits, cfg, uu)
        assert torch.isfinite(logits.gather(1, tok[:, None])).all() and torch.isfinite(logp).all()
    tok, _ = choose(logits, cfg, torch.tensor([1.0, 1.0]))
    assert tok.tolist() == [1, 2]


@pytest.mark.parametrize("max_rows", [1, 2, 5])
def test_continuous_batching_equals_the_static_batch(pol, prompts, max_rows, monkeypatch):
    """rollout.max_rows: finished groups' slots are refilled from the next prompts; per sample the same tokens,
    texts and finishes as the static batch for the same seed, log-probs within float rounding."""
    from codechat.policy import decoding
    cfg = SamplingConfig(max_new_tokens=14, seed=5, stop=["e"], top_k=40)
    static = Sampler(pol).sample(prompts, 3, cfg)
    widths, adds, real_step, real_add = [], [], decoding.FastDecoder.step, decoding.FastDecoder.add
    monkeypatch.setattr(decoding.FastDecoder, "step", lambda self, tok: widths.append(len(tok)) or real_step(self, tok))
    monkeypatch.setattr(decoding.FastDecoder, "add",
                        lambda self, ids, valid, n: adds.append(n) or real_add(self, ids, valid, n))
    seen = {}
    cont = Sampler(pol, max_rows=max_rows).sample(prompts, 3, cfg, on_finish=lambda r, t: seen.setdefault(r, t))
    assert torch.equal(cont.tokens, static.tokens) and torch.equal(cont.n_tokens, static.n_tokens)
    assert cont.texts == static.texts and cont.finish_reason == static.finish_reason
    assert (cont.logprobs - static.logprobs).abs().max() < 1e-4
    assert seen == dict(enumerate(static.texts))  # every sample reported once, with its final text
    assert max(widths) <= max_rows < 9 and adds and sum(adds) < 9  # decoded in slots; later samples were added
    assert len(set(static.n_tokens.tolist())) > 3  # samples finished at many different steps


def test_continuous_batching_refuses_a_negative_row_count(pol):
    with pytest.raises(CodechatError, match="rollout.max_rows"):
        Sampler(pol, max_rows=-1)


def test_rollout_max_rows_reaches_the_hf_engine(pol):
    from codechat.config import RolloutConfig
    from codechat.policy.engine import make_engine
    assert make_engine(pol, RolloutConfig(max_rows=6), SamplingConfig()).max_rows == 6


def test_each_row_stops_at_its_own_budget_and_its_own_context(pol, prompts, monkeypatch):
    monkeypatch.setattr(pol, "eos_token_ids", ())  # only budgets end samples
    cfg = SamplingConfig(max_new_tokens=20, seed=3)
    long = (prompts[1] * 200)[:1024 - 3]  # 3 tokens of room left in the tiny model's 1024-token context
    b = Sampler(pol).sample([prompts[0], long], 1, cfg)
    assert b.n_tokens.tolist() == [20, 3]  # the long prompt does not cut the short one's sample
    assert b.finish_reason == ["length", "length"]
    roomy = Sampler(pol).sample([prompts[0], prompts[1]], 1, cfg)  # the same draws (they depend on the row count)
    assert b.tokens[0].tolist() == roomy.tokens[0].tolist()
    per_row = Sampler(pol).sample(prompts, 1, SamplingConfig(max_new_tokens=50, seed=4), max_new=[2, 7, 4])
    assert per_row.n_tokens.tolist() == [2, 7, 4] and per_row.tokens.shape[1] == 7
    full = Sampler(pol).sample(prompts, 1, SamplingConfig(max_new_tokens=7, seed=4))
    for i, k in enumerate([2, 7, 4]):  # the same draws, each row cut at its own budget
        assert per_row.tokens[i, :k].tolist() == full.tokens[i, :k].tolist()
    for bad in ([2, 7], [2, 0, 4]):
        with pytest.raises(CodechatError, match="max_new"):
            Sampler(pol).sample(prompts, 1, cfg, max_new=bad)
