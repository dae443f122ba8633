"""The trimmed, masked-positions-only log-prob pass against a brute-force reference: the model's own forward over
each [prompt + completion] row alone, a full log_softmax, the sampled token picked (STYLE habit 10)."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat.policy import completion_logprobs
from policy_helpers import tiny_policy


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    return tiny_policy(tmp_path_factory)


def brute_force(model, prompts, idx, tokens, mask, temperature=1.0):
    """Per row, one unpadded forward; log_softmax over the whole vocabulary; (N, T) log-probs and entropies."""
    N, T = tokens.shape
    logp, ent = torch.zeros(N, T), torch.zeros(N, T)
    for i in range(N):
        real = int(mask[i].nonzero().max()) + 1 if mask[i].any() else 0
        if not real:
            continue
        p = prompts[int(idx[i])]
        ids = torch.tensor([p + tokens[i, :real].tolist()])
        out = model(input_ids=ids).logits[0, len(p) - 1: len(p) - 1 + real].float() / temperature  # (real, V)
        lsm = torch.log_softmax(out, -1)
        logp[i, :real] = lsm.gather(1, tokens[i, :real, None])[:, 0] * mask[i, :real]
        ent[i, :real] = -(lsm.exp() * lsm).sum(-1) * mask[i, :real]
    return logp, ent


def batch(seed, n=6, t=9):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 3, (n,), generator=g)
    tokens = torch.randint(4, 1000, (n, t), generator=g)
    lens = torch.randint(0, t - 2, (n,), generator=g)  # every row ends >= 2 columns before T: trimmed columns
    mask = (torch.arange(t)[None] < lens[:, None]).float()
    return idx, tokens, mask


@pytest.mark.parametrize("fast", [True, False])
def test_values_and_gradients_equal_brute_force(pol, fast):
    prompts = [pol.encode_prompt(s) for s in ["def add(a, b):\n", "x = 1\n", "Write f(s) reversing s.\n"]]
    idx, tokens, mask = batch(0)
    mask[2] = 0  # a row with nothing to score
    mask[0, 1] = 0  # a hole: that token only loses its log-prob
    params = [p for p in pol.model.parameters() if p.requires_grad]
    pol.model.zero_grad()
    ref_lp, ref_ent = brute_force(pol.model, prompts, idx, tokens, mask, temperature=0.7)
    (ref_lp.sum() * 0.3).backward()
    ref_g = [p.grad.clone() for p in params]
    pol.model.zero_grad()
    lp, ent = completion_logprobs(pol.model, prompts, idx, tokens, mask, temperature=0.7, with_entropy=True,
                                  fast=fast)
    (lp.sum() * 0.3).backward()
    assert lp.shape == tokens.shape and ent.shape == tokens.shape
    assert (lp - ref_lp.detach()).abs().max() < 1e-4 and (ent - ref_ent.detach()).abs().max() < 1e-4
    assert (lp[mask == 0] == 0).all() and (ent[mask == 0] == 0).all()
    for a, b in zip(params, ref_g):
        assert torch.allclose(a.grad, b, atol=1e-5, rtol=1e-3)
    pol.model.zero_grad()


def test_all_masked_out_gives_zeros_and_zero_gradients(pol):
    prompts = [pol.encode_prompt("x = 1\n")]
    lp = completion_logprobs(pol.model, prompts, torch.zeros(2, dtype=torch.long), torch.full((2, 5), 7),
                             torch.zeros(2, 5))
    assert lp.shape == (2, 5) and (lp == 0).all()


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 5), t=st.integers(3, 8))
def test_fuzzed_batches_agree_with_brute_force(pol, seed, n, t):
    prompts = [pol.encode_prompt(s) for s in ["a = [\n", "def f(x):\n", "# hi\n"]]
    idx, tokens, mask = batch(seed, n, t)
    g = torch.Generator().manual_seed(seed + 1)
    mask = mask * (torch.rand(mask.shape, generator=g) > 0.2)  # random holes
    with torch.no_grad():
        lp = completion_logprobs(pol.model, prompts, idx, tokens, mask)
        ref, _ = brute_force(pol.model, prompts, idx, tokens, mask)
    assert (lp - ref).abs().max() < 1e-4


def test_picked_logprob_gradient_is_exact():
    from codechat.policy.logprobs import _PickedLogprob

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(5, 7, generator=g, dtype=torch.float64) * 3).requires_grad_()
    tok = torch.tensor([0, 6, 3, 3, 1])
    assert torch.autograd.gradcheck(lambda x: _PickedLogprob.apply(x, tok)[0], (logits,))
    lp, ent = _PickedLogprob.apply(logits, tok)
    ref = torch.log_softmax(logits, -1)
    assert torch.allclose(lp, ref.gather(1, tok[:, None])[:, 0]) and not ent.requires_grad
    assert torch.allclose(ent, -(ref.exp() * ref).sum(-1))


def test_length_chunks_of_a_large_batch_equal_the_reference_path(pol):
    """40 rows of lengths 1..T in shuffled order: the fast path runs them in 2 length chunks; values and
    gradients equal the reference path's (one padded forward of the model's own)."""
    prompts = [pol.encode_prompt(s) for s in ["def add(a, b):\n", "x = 1\n", "Write f(s) reversing s.\n"]]
    g = torch.Generator().manual_seed(3)
    N, T = 40, 12
    idx = torch.randint(0, 3, (N,), generator=g)
    tokens = torch.randint(4, 1000, (N, T), generator=g)
    lens = torch.randint(1, T + 1, (N,), generator=g)
    mask = (torch.arange(T)[None] < lens[:, None]).float()
    mask[5, 0] = 0  # a hole at the start of a row
    params = [p for p in pol.model.parameters() if p.requires_grad]
    out = {}
    for fast in (True, False):
        pol.model.zero_grad()
        lp = completion_logprobs(pol.model, prompts, idx, tokens, mask, fast=fast)
        (lp * torch.linspace(0.1, 1, T)).sum().backward()
        out[fast] = (lp.detach(), [p.grad.clone() for p in params])
    assert (out[True][0] - out[False][0]).abs().max() < 1e-4
    for a, b in zip(out[True][1], out[False][1]):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-3)
    pol.model.zero_grad()


def test_length_chunks_cover_every_row_once():
    from codechat.policy.logprobs import _length_chunks

    lens = torch.tensor([3, 9, 1, 9, 4] * 8)
    chunks = _length_chunks(lens)
    rows = torch.cat([r for r, _ in chunks])
    assert len(chunks) == 2 and sorted(rows.tolist()) == list(range(40))
    assert all(int(lens[r].max()) == t for r, t in chunks)
    assert _length_chunks(torch.tensor([0, 0]))[0][1] == 1
