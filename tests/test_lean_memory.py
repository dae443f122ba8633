"""Leaner memory on the update path, each checked against the simple reference:
- SiluMulLinear and WeightedRMSNorm (policy/lean_ops.py) equal autograd's down_proj(silu(g) * u) and
  weight * rms_norm(x) in values and gradients and save fewer activations; completion_logprobs through them
  equals the model's own MLP and the plain norm, with less saved; under CPU bf16 autocast (mixed precision) both
  give the plain ops' autocast values bit for bit and their gradients bit for bit (SiluMulLinear) or to fp32
  rounding (WeightedRMSNorm, whose backward is written out), again with less saved;
- the async producer keeps no weights snapshot once it has loaded it (train/producer.py)."""
import gc
import weakref

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from transformers import LlamaConfig, LlamaForCausalLM

from codechat.config.io import load_config
from codechat.policy import fastlm
from codechat.policy.logprobs import completion_logprobs
from codechat.policy.lean_ops import SiluMulLinear, WeightedRMSNorm, lean_swiglu
from codechat.train import train
from codechat.train import producer as producer_mod
from codechat.train import rollouts as rollouts_mod


def saved_bytes(fn):
    """Bytes of the distinct storages autograd saves while fn() runs."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 6), inter=st.integers(1, 9), width=st.integers(1, 5), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_silu_mul_linear_equals_autograd(rows, inter, width, bias, seed):
    g_ = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64, requires_grad=True)  # noqa: E731
    g, u, w = mk(2, rows, inter), mk(2, rows, inter), mk(width, inter)
    b = mk(width) if bias else None
    ours = SiluMulLinear.apply(g, u, w, b)
    ref = F.linear(F.silu(g) * u, w, b)
    assert torch.equal(ours, ref)  # the same forward ops
    up = torch.randn(ref.shape, generator=g_, dtype=torch.float64)
    ins = [g, u, w] + ([b] if bias else [])
    a = torch.autograd.grad((ours * up).sum(), ins)
    r = torch.autograd.grad((ref * up).sum(), ins)
    for x, y in zip(a, r):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(SiluMulLinear.apply, (g, u, w, b))


def test_silu_mul_linear_saves_half_the_mlp_activations():
    g, u = torch.randn(64, 96, requires_grad=True), torch.randn(64, 96, requires_grad=True)
    w = torch.randn(32, 96, requires_grad=True)
    _, ours = saved_bytes(lambda: SiluMulLinear.apply(g, u, w, None))
    _, ref = saved_bytes(lambda: F.linear(F.silu(g) * u, w))
    act = 64 * 96 * 4  # one (rows, intermediate) fp32 tensor
    assert ref - ours == 2 * act  # silu(g) and the product are no longer kept


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 6), width=st.integers(1, 9), seed=st.integers(0, 2**16), frozen=st.booleans())
def test_weighted_rms_norm_equals_autograd(rows, width, seed, frozen):
    g_ = torch.Generator().manual_seed(seed)
    x = torch.randn(2, rows, width, generator=g_, dtype=torch.float64, requires_grad=True)
    w = torch.randn(width, generator=g_, dtype=torch.float64, requires_grad=not frozen)  # frozen: LoRA's norms
    ours = WeightedRMSNorm.apply(x, w, 1e-6)
    ref = w * F.rms_norm(x, (width,), eps=1e-6)
    assert torch.equal(ours, ref)
    up = torch.randn(ref.shape, generator=g_, dtype=torch.float64)
    ins = [x] if frozen else [x, w]
    for a, r in zip(torch.autograd.grad((ours * up).sum(), ins), torch.autograd.grad((ref * up).sum(), ins)):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x_, w_: WeightedRMSNorm.apply(x_, w_, 1e-6), (x, w))


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 300), width=st.sampled_from([1, 7, 64, 256, 896]), scale=st.sampled_from([1e-3, 1.0, 30.0]),
       seed=st.integers(0, 2**16))
def test_weighted_rms_norm_in_fp32_matches_the_plain_ops(rows, width, scale, seed):
    """fp32 at the model's widths: the plain ops' forward bit for bit, their gradients to fp32 rounding, and
    within the same distance of the exact (float64) gradients as the plain ops' own."""
    g_ = torch.Generator().manual_seed(seed)
    x = (torch.randn(2, rows, width, generator=g_) * scale).requires_grad_()
    w = (torch.randn(width, generator=g_) * 0.1 + 1).requires_grad_()
    up = torch.randn(2, rows, width, generator=g_)
    ours = WeightedRMSNorm.apply(x, w, 1e-6)
    ref = w * F.rms_norm(x, (width,), eps=1e-6)
    assert torch.equal(ours, ref)
    a = torch.autograd.grad((ours * up).sum(), [x, w])
    r = torch.autograd.grad((ref * up).sum(), [x, w])
    x64, w64, up64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_(), up.double()
    n64 = F.rms_norm(x64, (width,), eps=1e-6)
    exact = torch.autograd.grad((w64 * n64 * up64).sum(), [x64, w64])
    # each gradient's size before cancellation (width 1: dx is 0 exactly, a sum of terms of this size)
    rstd = n64.detach().abs().amax(-1, keepdim=True) / x64.detach().abs().amax(-1, keepdim=True).clamp_min(1e-30)
    sizes = [((up64 * w64.detach()).abs() * rstd).max(), (up64 * n64.detach()).abs().sum((0, 1)).max()]
    for ours_g, ref_g, ex, size in zip(a, r, exact, sizes):
        assert (ours_g - ref_g).abs().max() <= 1e-5 * size  # fp32 rounding apart
        err_ours, err_ref = (ours_g.double() - ex).abs().max(), (ref_g.double() - ex).abs().max()
        assert err_ours <= 2 * err_ref + 1e-6 * size  # as close to exact as the plain ops' own


def test_weighted_rms_norm_keeps_only_its_input():
    x, w = torch.randn(64, 96, requires_grad=True), torch.randn(96, requires_grad=True)
    _, ours = saved_bytes(lambda: WeightedRMSNorm.apply(x, w, 1e-6))
    _, ref = saved_bytes(lambda: w * F.rms_norm(x, (96,), eps=1e-6))
    assert ref - ours >= 64 * 96 * 4  # the normalised x is no longer kept


def autocast_mlp(seed: int, rows: int, bias: bool):
    """x (2, rows, 24) fp32 and fp32 gate/up/down weights (I = 40, C = 24) needing gradients, as under mixed
    precision; the gate/up projections run as autocast's linears (bf16 g, u)."""
    g_ = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g_).requires_grad_()  # noqa: E731
    x, wg, wu, wd = mk(2, rows, 24), mk(40, 24), mk(40, 24), mk(24, 40)
    return x, wg, wu, wd, (mk(24) if bias else None)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 40), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_silu_mul_linear_under_cpu_autocast_equals_the_plain_ops(rows, bias, seed):
    x, wg, wu, wd, b = autocast_mlp(seed, rows, bias)
    up = torch.randn(2, rows, 24, generator=torch.Generator().manual_seed(seed + 1))
    ins = [x, wg, wu, wd] + ([b] if bias else [])

    def run(lean: bool):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            xb = x.to(torch.bfloat16)  # fastlm casts once for both projections
            g, u = F.linear(xb, wg), F.linear(xb, wu)
            out = SiluMulLinear.apply(g, u, wd, b) if lean else F.linear(F.silu(g) * u, wd, b)
        return out, torch.autograd.grad((out.float() * up).sum(), ins)
    (ours, a), (ref, r) = run(True), run(False)
    assert ours.dtype == ref.dtype == torch.bfloat16 and torch.equal(ours, ref)
    for x_, y_ in zip(a, r):
        assert x_.dtype == y_.dtype and torch.equal(x_, y_)  # fp32 master gradients, as autocast's casts return


def test_silu_mul_linear_under_cpu_autocast_saves_less():
    x, wg, wu, wd, _ = autocast_mlp(0, 64, False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        xb = x.to(torch.bfloat16)
        g, u = F.linear(xb, wg).detach().requires_grad_(), F.linear(xb, wu).detach().requires_grad_()
        _, ours = saved_bytes(lambda: SiluMulLinear.apply(g, u, wd, None))
        _, ref = saved_bytes(lambda: F.linear(F.silu(g) * u, wd))
    assert ref - ours >= 2 * 64 * 40 * 2  # silu(g) (and the product, or its copy) no longer kept: bf16 (rows, I)


@pytest.mark.parametrize("rows, width", [(5, 24), (512, 256)])
def test_weighted_rms_norm_under_cpu_autocast_matches_the_plain_norm(rows, width):
    """Under bf16 autocast the norm stays fp32 (its backward's matrix-vector products too): the plain norm's
    output bit for bit and its gradients to fp32 rounding, not bf16's."""
    g_ = torch.Generator().manual_seed(0)
    x = torch.randn(2, rows, width, generator=g_, requires_grad=True)
    w = torch.randn(width, generator=g_, requires_grad=True)
    up = torch.randn(2, rows, width, generator=g_)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = WeightedRMSNorm.apply(x, w, 1e-6)
        ref = w * F.rms_norm(x.float(), (width,), eps=1e-6).to(x.dtype)  # fastlm's plain norm
    assert ours.dtype == torch.float32 and torch.equal(ours, ref)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = torch.autograd.grad((ours * up).sum(), [x, w])
        r = torch.autograd.grad((ref * up).sum(), [x, w])
    for ours_g, ref_g in zip(a, r):
        assert ours_g.dtype == torch.float32
        torch.testing.assert_close(ours_g, ref_g, rtol=1e-5, atol=1e-5 * ref_g.abs().max().item())


def tiny_llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).float()


@pytest.mark.parametrize("bf16", [False, True])
def test_logprobs_through_the_lean_ops_equal_the_plain_ones(monkeypatch, bf16):
    """fp32, and under CPU bf16 autocast over the fp32 weights (model.compute_dtype): the same log-probs, the same
    gradients to fp32 rounding (down_proj's to a bf16 rounding, below), less saved."""
    model = tiny_llama()
    assert lean_swiglu(model.model.layers[0].mlp)
    prompts = [[1, 2, 3], [4, 5]]
    idx = torch.tensor([0, 0, 1, 1])
    tok = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0

    def run():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            lp, nbytes = saved_bytes(lambda: completion_logprobs(model, prompts, idx, tok, mask, fast=True))
        (lp * torch.linspace(-1, 1, 6)).sum().backward()
        return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, nbytes
    lean_lp, lean_g, lean_b = run()
    monkeypatch.setattr(fastlm, "lean_training", lambda x: False)  # the model's own MLP and the plain norm
    ref_lp, ref_g, ref_b = run()
    assert torch.equal(lean_lp, ref_lp)
    for n in ref_g:  # the residual stream's gradient sums its parts in another order: fp32 rounding apart
        if bf16 and n.endswith("down_proj.weight"):  # the prompt pass's and the completions' parts: autocast's
            # cached bf16 weight copy sums them in bf16 before the cast back, SiluMulLinear in fp32
            assert (lean_g[n] - ref_g[n]).abs().max() <= 2**-7 * ref_g[n].abs().max(), n  # a bf16 rounding
        else:
            torch.testing.assert_close(lean_g[n], ref_g[n], rtol=1e-6, atol=1e-7)
    assert lean_b < ref_b


def test_producer_drops_the_snapshot_once_loaded(tmp_path, monkeypatch):
    """While the producer samples a batch, the snapshot it loaded its weights from is gone (the copy it loaded
    into is the only one); before the fix the work item kept it alive through the batch."""
    alive, real_collect = [], rollouts_mod.collect
    refs = []
    real_snapshot = producer_mod.weights_snapshot

    def snapshot(model):
        snap = real_snapshot(model)
        refs.append(weakref.ref(next(iter(snap.values()))))
        return snap

    def collect(*a, **k):
        gc.collect()
        alive.append(refs[-1]() is not None)
        return real_collect(*a, **k)
    monkeypatch.setattr(producer_mod, "weights_snapshot", snapshot)
    monkeypatch.setattr(rollouts_mod, "collect", collect)
    train(load_config(None, ["data.train=builtin:toy", "sampling.max_new_tokens=6", "log.progress=false",
                             "log.plot=false", "verifier.workers=1", "rl.prompts_per_step=2", "rl.group_size=2",
                             "checkpoint.every=0", "log.audit=false", "stages=[grpo]", "rl.steps=2",
                             "rl.async_steps=1", f"run_dir={tmp_path / 'run'}"]))
    assert alive and not any(alive)
