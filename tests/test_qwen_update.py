"""The update's log-prob pass on the Qwen-shaped model (151,936-token tied table): the fast path (fused, chunked
LM head; the table's gradient as one buffer, policy/lm_head.py) gives the values and gradients of transformers'
own forward with full logits and log-softmax (STYLE habit 10)."""
import pytest
import torch

from codechat.policy import completion_logprobs
from codechat.policy.fastlm import FastLM
from codechat.policy.lm_head import fusable
from qwen_helpers import qwen_policy


@pytest.fixture(scope="module")
def pol():
    return qwen_policy("qwen2.5")


def test_fast_path_equals_full_logits_on_the_tied_big_vocabulary(pol):
    model = pol.model
    fl = FastLM(model)
    assert fl.tied_head() and fusable(model.lm_head, torch.zeros(1, model.config.hidden_size))
    pad = model.model.embed_tokens.padding_idx
    assert pad is not None
    prompts = [pol.encode_prompt(s) for s in ["Write add(a, b).", "Reverse a string s."]]
    g = torch.Generator().manual_seed(0)
    idx = torch.tensor([0, 0, 1, 1, 1])
    tokens = torch.randint(0, 151_000, (5, 7), generator=g)
    tokens[1, 2] = tokens[3, 0] = pad  # the padding id as a sampled token: its table row gets no lookup gradient
    mask = torch.ones(5, 7)
    mask[2, 4:] = 0  # a shorter row
    mask[4, 1] = 0  # a hole
    up = torch.randn(5, 7, generator=g)  # an upstream gradient
    out = {}
    for fast in (True, False):
        model.zero_grad(set_to_none=True)
        lp, ent = completion_logprobs(model, prompts, idx, tokens, mask, temperature=0.9, with_entropy=True,
                                      fast=fast)
        (lp * up).sum().backward()
        out[fast] = lp.detach(), ent, {k: p.grad.clone() for k, p in model.named_parameters()}
    (lp_f, ent_f, g_f), (lp_r, ent_r, g_r) = out[True], out[False]
    model.zero_grad(set_to_none=True)
    assert (lp_f - lp_r).abs().max() < 1e-4 and (ent_f - ent_r).abs().max() < 1e-4
    assert (lp_f[mask == 0] == 0).all()
    assert sorted(g_f) == sorted(g_r)
    for k in g_f:  # fp32 sums in another order: within 1e-5 of each tensor's largest entry
        assert (g_f[k] - g_r[k]).abs().max() <= 1e-5 * g_r[k].abs().max(), k
    table = g_f["model.embed_tokens.weight"]
    assert table[tokens[0, 0]].abs().sum() > 0 and table.abs().sum() > 0


def test_fast_forward_self_check_skips_the_head_and_can_fail(pol, monkeypatch):
    """FastLM.check compares final-normed hidden states, so it builds no (B, L, V) logits (the model's own forward,
    through the root module as FSDP2 requires, computes one position's); a forward that differs from
    transformers' fails it."""
    calls = []
    hook = pol.model.lm_head.register_forward_hook(lambda mod, args, out: calls.append(tuple(args[0].shape)))
    try:
        assert FastLM(pol.model).check() and calls and all(shape[1] == 1 for shape in calls)
        monkeypatch.setattr(FastLM, "final_norm", lambda self, h: self._norm(self.inner.norm, h) * 1.01)
        assert not FastLM(pol.model).check()
    finally:
        hook.remove()
