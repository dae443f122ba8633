"""The fused, row-chunked LM head + log-prob (policy/lm_head.py) against the plain ops: linear, log_softmax over
the whole vocabulary, the sampled token picked (STYLE habit 10)."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat.policy import completion_logprobs
from codechat.policy.lm_head import TiedGrad, _FusedHead, blocks_for, compute_dtype, fusable, head_logprobs, \
    tied_embedding
from policy_helpers import tiny_policy


def plain(h, head, tok, temperature):
    """(R,) log-probs and entropies the simple way: full (R, V) logits and log-softmax."""
    lsm = torch.log_softmax(head(h) / temperature, -1)  # (R, V)
    return lsm.gather(1, tok[:, None])[:, 0], -(lsm.exp() * lsm).sum(-1)


@settings(max_examples=25, deadline=None)
@given(R=st.integers(1, 40), C=st.integers(1, 12), V=st.integers(2, 50), bias=st.booleans(),
       temperature=st.sampled_from([1.0, 0.7, 1.3]), rows=st.integers(1, 17), cols=st.integers(1, 20),
       seed=st.integers(0, 2**16))
def test_values_and_gradients_equal_the_plain_ops(R, C, V, bias, temperature, rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(C, V, bias=bias).double()
    h = torch.randn(R, C, generator=g, dtype=torch.float64, requires_grad=True)
    tok = torch.randint(0, V, (R,), generator=g)
    up = torch.randn(R, generator=g, dtype=torch.float64)  # an upstream gradient
    params = [h, *head.parameters()]
    want_lp, want_ent = plain(h, head, tok, temperature)
    want_g = torch.autograd.grad((want_lp * up).sum(), params)
    lp, ent = head_logprobs(h, head, tok, temperature, blocks=(rows, cols))
    got_g = torch.autograd.grad((lp * up).sum(), params)
    assert torch.allclose(lp, want_lp, atol=1e-12) and torch.allclose(ent, want_ent.detach(), atol=1e-12)
    assert not ent.requires_grad
    for a, b in zip(got_g, want_g):
        assert torch.allclose(a, b, atol=1e-12)


def test_gradcheck_and_no_entropy():
    g = torch.Generator().manual_seed(1)
    head = torch.nn.Linear(5, 11).double()
    h = torch.randn(7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    tok = torch.randint(0, 11, (7,), generator=g)
    assert torch.autograd.gradcheck(lambda x, w, b: _FusedHead.apply(x, w, b, tok, 0.8, True, (2, 4), None,
                                                                                   torch.float64)[0],
                                    (h, head.weight, head.bias))
    lp, ent = head_logprobs(h, head, tok, 0.5, with_entropy=False, blocks=(3, 5))
    assert torch.allclose(lp, plain(h, head, tok, 0.5)[0]) and (ent == 0).all()


def test_blocks_and_fusable(monkeypatch):
    assert blocks_for(64, 151_936) == (64, 16_384) and blocks_for(512, 151_936) == (512, 2048)  # ~2^20 logits
    assert blocks_for(10_000, 151_936) == (4096, 256) and blocks_for(3, 100) == (3, 100)  # >= 256 columns
    head, h = torch.nn.Linear(4, 9), torch.randn(3, 4)
    assert not fusable(head, h)  # 27 logits: the (R, V) path is cheaper
    assert fusable(torch.nn.Linear(4, 1 << 16, bias=False), torch.randn(1, 4))  # one row of a large vocabulary
    monkeypatch.setattr("codechat.policy.lm_head.FUSE_MIN_LOGITS", 27)
    assert fusable(head, h) and fusable(head, h.double()) and fusable(torch.nn.Linear(4, 9).bfloat16(), h.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fusable(head, h) and compute_dtype(head.weight, h) == torch.bfloat16
    assert compute_dtype(head.weight, h) == torch.float32


@pytest.mark.parametrize("weights", ["float32", "bfloat16"])
@pytest.mark.parametrize("bias", [False, True])
def test_bf16_compute_equals_autocasts_linear_and_fp32_softmax(weights, bias):
    """Under bf16 autocast over fp32 weights (mixed precision) and with pure bf16 weights: the fused head gives
    what autocast's (or bf16's) linear followed by an fp32 log-softmax gives, within bf16 rounding, and d W comes
    back in W's own dtype (fp32 masters get an fp32 gradient)."""
    g = torch.Generator().manual_seed(5)
    head = torch.nn.Linear(16, 300, bias=bias).to(getattr(torch, weights))
    h0 = torch.randn(37, 16, generator=g).to(head.weight.dtype)
    tok = torch.randint(0, 300, (37,), generator=g)
    up = torch.randn(37, generator=g)
    out = {}
    for fused in (True, False):
        h = h0.clone().requires_grad_(True)
        head.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=weights == "float32"):
            if fused:
                lp, ent = head_logprobs(h, head, tok, 0.9, blocks=(8, 64))
            else:
                lsm = torch.log_softmax(head(h).float() / 0.9, -1)  # (R, V)
                lp, ent = lsm.gather(1, tok[:, None])[:, 0], -(lsm.exp() * lsm).sum(-1)
        (lp * up).sum().backward()
        out[fused] = lp.detach(), ent.detach(), h.grad.float(), head.weight.grad, \
            head.bias.grad if bias else None
    (lp_f, ent_f, dh_f, dw_f, db_f), (lp_p, ent_p, dh_p, dw_p, db_p) = out[True], out[False]
    assert lp_f.dtype == torch.float32 and dw_f.dtype == head.weight.dtype
    assert torch.allclose(lp_f, lp_p, atol=0.05) and torch.allclose(ent_f, ent_p, atol=0.05)
    for a, b in ((dh_f, dh_p), (dw_f.float(), dw_p.float())) + (((db_f.float(), db_p.float()),) if bias else ()):
        assert (a - b).norm() <= 0.02 * b.norm(), ((a - b).norm(), b.norm())
    exact = torch.log_softmax(torch.nn.functional.linear(h0.double(), head.weight.double(),
                                                         head.bias.double() if bias else None) / 0.9, -1)
    assert 0 < (lp_f.double() - exact.gather(1, tok[:, None])[:, 0]).abs().max() < 0.1  # bf16 GEMMs: an effect


@pytest.mark.parametrize("fused_head", [True, False])
def test_tied_table_gradient_equals_autograds(fused_head):
    """A table used as the embedding and as the head: the lookup's rows added into the head's d W (TiedGrad) give
    autograd's gradient, padding row included (nn.Embedding gives it none); with the (R, V) head, the lookup's
    part alone."""
    g = torch.Generator().manual_seed(3)
    emb = torch.nn.Embedding(13, 5, padding_idx=2).double()
    head = torch.nn.Linear(5, 13, bias=False).double()
    head.weight = emb.weight
    ids = torch.tensor([[2, 4, 4, 7], [0, 2, 12, 4]])  # repeats and the padding id
    tok = torch.randint(0, 13, (8,), generator=g)
    up = torch.randn(8, generator=g, dtype=torch.float64)

    def loss(lookup, logprobs):
        h = torch.tanh(lookup(ids)).flatten(0, 1) * 1.5  # (8, C)
        return (logprobs(h) * up).sum()

    want = torch.autograd.grad(loss(emb, lambda h: plain(h, head, tok, 0.8)[0]), emb.weight)[0]
    tied = TiedGrad()
    head_part = (lambda h: head_logprobs(h, head, tok, 0.8, blocks=(5, 4), tied=tied)[0]) if fused_head else \
        (lambda h: plain(h, head, tok, 0.8)[0])
    got = torch.autograd.grad(loss(lambda i: tied_embedding(i, emb, tied), head_part), emb.weight)[0]
    assert torch.allclose(got, want, atol=1e-12) and tied.grad is None
    assert want[2].abs().sum() > 0  # the padding row still gets the head's part


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    return tiny_policy(tmp_path_factory)


def test_training_forward_saves_no_vocabulary_sized_tensor(pol):
    """Through completion_logprobs' fast path, no tensor over the vocabulary is kept for the backward (the plain
    head keeps the (R, V) softmax), and the values and gradients equal the plain head's."""
    V = pol.model.config.vocab_size
    prompts = [pol.encode_prompt(s) for s in ["def f(x):\n", "y = 2\n"]]
    g = torch.Generator().manual_seed(0)
    idx, tokens, mask = torch.tensor([0, 0, 1, 1]), torch.randint(4, V, (4, 40), generator=g), torch.ones(4, 40)
    R = int(mask.sum())
    params = [p for p in pol.model.parameters() if p.requires_grad]
    out = {}
    for fused in (True, False):
        saved = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("codechat.policy.lm_head.FUSE_MIN_LOGITS", 0 if fused else 1 << 62)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
                lp = completion_logprobs(pol.model, prompts, idx, tokens, mask, temperature=0.9, fast=True)
        pol.model.zero_grad()
        (lp * torch.linspace(-1, 1, 40)).sum().backward()
        out[fused] = (lp.detach(), [p.grad.clone() for p in params], (R, V) in saved)
    (lp_f, g_f, big_f), (lp_p, g_p, big_p) = out[True], out[False]
    assert big_p and not big_f  # the plain head keeps the (R, V) softmax (R = 160, hidden 192: no clash)
    assert torch.allclose(lp_f, lp_p, atol=1e-6)
    for a, b in zip(g_f, g_p):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
