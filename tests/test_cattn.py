"""The decode step's C functions (policy/cattn.py) against the torch ops they stand in for."""
import os
import signal
import subprocess
import time

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat.config import SamplingConfig
from codechat.policy import Sampler, cattn, lean_ops
from codechat.policy.fastlm import rotate_half
from codechat.policy.logprobs import completion_logprobs
from codechat.policy.sampler import choose
from policy_helpers import pol, prompts  # noqa: F401 - fixtures (the tiny policy, PROMPT_TEXTS encoded)

pytestmark = pytest.mark.skipif(cattn.kernel() is None, reason=f"no C kernel here: {cattn.unavailable_reason()}")


def reference(qkv, H, Hkv, rope, Kp, Vp, pmask, Kg, Vg, t, gstart, pidx, scale):
    """Row by row in float64: rotary, then softmax over the prompt's unmasked columns and columns gstart..t."""
    B, D = qkv.shape[0], Kp.shape[-1]
    x = qkv.double().view(B, H + 2 * Hkv, D)
    q, k, v = x[:, :H], x[:, H:H + Hkv], x[:, H + Hkv:]
    if rope is not None:
        cos, sin = (r.double()[:, None] for r in rope)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    out = torch.empty(B, H, D, dtype=torch.float64)
    for b in range(B):
        p, g0 = int(pidx[b]), int(gstart[b]) if gstart is not None else 0
        keys = torch.cat([Kp[p].double(), Kg[b, :, g0:t].double(), k[b][:, None]], 1)  # (Hkv, S, D)
        vals = torch.cat([Vp[p].double(), Vg[b, :, g0:t].double(), v[b][:, None]], 1)
        mask = torch.cat([pmask[p].double(), torch.zeros(t - g0 + 1, dtype=torch.float64)])
        keys, vals = keys.repeat_interleave(H // Hkv, 0), vals.repeat_interleave(H // Hkv, 0)  # (H, S, D)
        s = torch.einsum("hd,hsd->hs", q[b], keys) * scale + mask
        out[b] = torch.einsum("hs,hsd->hd", s.softmax(-1), vals)
    return out.view(B, H * D), k, v


@settings(max_examples=60, deadline=None)
@given(B=st.integers(1, 6), P=st.integers(1, 3), Hkv=st.integers(1, 3), grp=st.sampled_from([1, 2, 4]),
       D=st.sampled_from([2, 8, 64, 80, 128]), Lp=st.integers(1, 9), T=st.integers(1, 7), data=st.data(),
       bf16=st.booleans(), rotary=st.booleans(), scale_exp=st.integers(-3, 2))
def test_attention_matches_a_float64_reference(B, P, Hkv, grp, D, Lp, T, data, bf16, rotary, scale_exp):
    """Any shape, grouped-query, masked prompt columns, rows that joined late (gstart), fp32 or bf16 projections,
    large and small score scales: the output within float rounding, and this step's (rotated) k and v in column t."""
    H = Hkv * grp
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    t = data.draw(st.integers(0, T - 1))
    qkv = (torch.randn(B, (H + 2 * Hkv) * D, generator=g) * 2.0 ** scale_exp)
    qkv = qkv.to(torch.bfloat16) if bf16 else qkv
    rope = (torch.randn(B, D, generator=g), torch.randn(B, D, generator=g)) if rotary else None
    Kp, Vp = torch.randn(P, Hkv, Lp, D, generator=g), torch.randn(P, Hkv, Lp, D, generator=g)
    pmask = torch.where(torch.rand(P, Lp, generator=g) < 0.3, float("-inf"), 0.0)
    Kg, Vg = torch.randn(B, Hkv, T, D, generator=g), torch.randn(B, Hkv, T, D, generator=g)
    pidx = torch.randint(0, P, (B,), generator=g)
    gstart = torch.randint(0, t + 1, (B,), generator=g) if data.draw(st.booleans()) else None
    ref, k, v = reference(qkv, H, Hkv, rope, Kp, Vp, pmask, Kg, Vg, t, gstart, pidx, D ** -0.5)
    out = cattn.attend(qkv, H, Hkv, rope, (Kp, Vp), pmask, (Kg, Vg), t, gstart, pidx, D ** -0.5)
    assert out.shape == (B, H * D) and out.dtype == torch.float32
    assert torch.allclose(out.double(), ref, rtol=1e-4, atol=1e-5), (out.double() - ref).abs().max()
    assert torch.allclose(Kg[:, :, t].double(), k, rtol=1e-5, atol=1e-6) and torch.equal(Vg[:, :, t].double(), v)


def test_attention_refuses_what_would_read_outside_its_buffers():
    B, P, H, D, Lp, T = 2, 1, 2, 8, 3, 4
    args = lambda pidx, gstart, t=1: (torch.randn(B, 4 * D), 2, 1, None, (torch.randn(P, 1, Lp, D),  # noqa: E731
                                      torch.randn(P, 1, Lp, D)), torch.zeros(P, Lp),
                                      (torch.zeros(B, 1, T, D), torch.zeros(B, 1, T, D)), t, gstart, pidx, 1.0)
    with pytest.raises(ValueError, match="out of range"):
        cattn.attend(*args(torch.tensor([0, 1]), None))  # prompt 1 of 1
    with pytest.raises(ValueError, match="out of range"):
        cattn.attend(*args(torch.tensor([0, 0]), torch.tensor([0, 2])))  # a first column after t
    with pytest.raises(ValueError, match="outside"):
        cattn.attend(*args(torch.tensor([0, 0]), None, t=T))
    with pytest.raises(ValueError, match="does not fit"):
        cattn.attend(torch.randn(B, 5 * D), 2, 1, None, *args(torch.tensor([0, 0]), None)[4:])
    with pytest.raises(ValueError, match="contiguous"):
        cattn.attend(*args(torch.tensor([0, 0]), None)[:4], (torch.randn(P, 1, D, Lp).transpose(2, 3),
                     torch.randn(P, 1, Lp, D)), *args(torch.tensor([0, 0]), None)[5:])


def test_attention_gives_nan_for_nan_input_as_torch_does():
    B, H, D, Lp, T = 1, 1, 8, 2, 2
    qkv = torch.randn(B, 3 * D)
    qkv[0, 0] = float("nan")
    out = cattn.attend(qkv, H, 1, None, (torch.randn(1, 1, Lp, D), torch.randn(1, 1, Lp, D)), torch.zeros(1, Lp),
                       (torch.zeros(B, 1, T, D), torch.zeros(B, 1, T, D)), 0, None, torch.zeros(B, dtype=torch.long),
                       1.0)
    assert out.isnan().all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_and_silu_match_the_torch_ops(dtype):
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 30.0):
        x, w = torch.randn(7, 96, generator=g) * scale, torch.randn(96, generator=g)
        ref = F.rms_norm(x, (96,), w, 1e-6).to(dtype)
        got = cattn.rms_norm(x, w, 1e-6, dtype)
        assert got.dtype == dtype
        assert torch.allclose(got.float(), ref.float(), rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=0)
        gu = (torch.randn(7, 2 * 40, generator=g) * scale).to(dtype)
        g_, u = gu.chunk(2, -1)
        ref, got = F.silu(g_) * u, cattn.silu_mul(gu)
        assert got.dtype == dtype and got.shape == (7, 40)
        assert torch.allclose(got.float(), ref.float(), rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=1e-30)
    edge = torch.tensor([[float("-inf"), -100.0, -90.0, 100.0, float("inf"), float("nan")] + [2.0] * 6]).to(dtype)
    torch.testing.assert_close(cattn.silu_mul(edge), F.silu(edge[:, :6]) * edge[:, 6:], equal_nan=True)


def test_sampling_follows_the_inverse_cdf_rule():
    """Same tokens as sampler.choose but where the uniform falls within rounding of a CDF step; log-probs within
    float rounding; a token of probability 0 is never drawn, even with u at its edges."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 1000, generator=g) * 3
    logits[:, 200:900] = float("-inf")
    cfg = SamplingConfig()
    same = 0
    for _ in range(20):
        u = torch.rand(64, generator=g)
        a, la = choose(logits, cfg, u)
        b, lb = cattn.sample_rows(logits, u)
        same += int((a == b).sum())
        assert torch.allclose(la[a == b], lb[a == b], atol=1e-5)
        assert not ((b >= 200) & (b < 900)).any()
    assert same >= 0.99 * 20 * 64
    edge = torch.tensor([0.0, 1.0 - 2 ** -24, 0.5])
    row = torch.full((3, 10), float("-inf"))
    row[:, 3], row[:, 6] = 0.0, -1.0
    tok, logp = cattn.sample_rows(row, edge)
    assert tok.tolist() == [3, 6, 3] and torch.allclose(logp, torch.log_softmax(row, -1).gather(1, tok[:, None])[:, 0])
    tok, logp = cattn.sample_rows(torch.full((1, 5), float("nan")), torch.tensor([0.5]))
    assert logp.isnan().all()


def test_the_sampler_works_without_the_kernel(pol, prompts, monkeypatch):
    """No compiler (or the build failing): the kernel is None with its reason, and the sampler uses the torch
    ops; with the kernel, the same tokens for this seed."""
    cfg = SamplingConfig(max_new_tokens=16, seed=3)
    with_kernel = Sampler(pol).sample(prompts, 4, cfg)
    monkeypatch.setattr(cattn, "_state", {})
    monkeypatch.setattr(cattn, "_compiler", lambda: None)
    assert cattn.kernel() is None and "no C compiler" in cattn.unavailable_reason()
    without = Sampler(pol).sample(prompts, 4, cfg)
    assert torch.equal(with_kernel.tokens, without.tokens)
    assert (with_kernel.logprobs - without.logprobs).abs().max() < 1e-4


def test_a_failing_build_is_reported_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path))
    monkeypatch.setattr(cattn, "_state", {})
    monkeypatch.setattr(cattn, "SOURCE", "this is not C")
    assert cattn.kernel() is None and "failed" in cattn.unavailable_reason()
    monkeypatch.setattr(cattn, "_state", {})
    monkeypatch.setenv("CODECHAT_NO_CKERNEL", "1")
    assert cattn.kernel() is None and "CODECHAT_NO_CKERNEL" in cattn.unavailable_reason()


def test_the_build_is_cached_per_source(monkeypatch, tmp_path):
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path))
    monkeypatch.setattr(cattn, "_state", {})
    assert cattn.kernel() is not None
    built = list((tmp_path / "kernels").glob("decode_attn-*.so"))
    assert len(built) == 1
    calls = []
    monkeypatch.setattr(cattn, "_state", {})
    monkeypatch.setattr(cattn.subprocess, "run", lambda *a, **k: calls.append(a) or subprocess.run(*a, **k))
    assert cattn.kernel() is not None and not calls  # loaded, not compiled again


def test_rows_split_over_torch_threads_give_the_same_output():
    """With torch on several threads, row ranges run in parallel (ctypes drops the GIL): the same bits as one."""
    g = torch.Generator().manual_seed(1)
    B, P, Hkv, H, D, Lp, T, t = 40, 3, 2, 4, 16, 5, 6, 4
    qkv, rope = torch.randn(B, (H + 2 * Hkv) * D, generator=g), (torch.randn(B, D, generator=g),) * 2
    Kp, Vp, pidx = torch.randn(P, Hkv, Lp, D, generator=g), torch.randn(P, Hkv, Lp, D, generator=g), torch.arange(B) % P
    outs, caches = [], []
    threads = torch.get_num_threads()
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            Kg, Vg = torch.zeros(B, Hkv, T, D), torch.zeros(B, Hkv, T, D)
            outs.append(cattn.attend(qkv, H, Hkv, rope, (Kp, Vp), torch.zeros(P, Lp), (Kg, Vg), t, None, pidx, 0.3))
            caches.append((Kg, Vg))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1]) and all(torch.equal(a, b) for a, b in zip(*caches))


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 9), st.integers(1, 5), st.sampled_from([2, 8, 64, 128])),
       bf16=st.booleans(), seed=st.integers(0, 2**31 - 1), scale_exp=st.integers(-8, 8))
def test_rotary_is_the_torch_ops_bit_for_bit(shape, bf16, seed, scale_exp):
    """The training forward's rotary (lean_ops.Rotary): output and x's gradient equal to the torch ops' bits."""
    g = torch.Generator().manual_seed(seed)
    B, L, H, D = shape
    x = (torch.randn(B, L, H, D, generator=g) * 2.0 ** scale_exp).to(torch.bfloat16 if bf16 else torch.float32)
    x.requires_grad_()
    ang = torch.randn(B, L, D, generator=g) * 10
    cos, sin = ang.cos()[:, :, None], ang.sin()[:, :, None]
    ref = x * cos + rotate_half(x) * sin
    grad = torch.randn(ref.shape, generator=g)
    (ref_gx,) = torch.autograd.grad(ref, x, grad)
    y = lean_ops.rotary(x, cos, sin, rotate_half)
    (gx,) = torch.autograd.grad(y, x, grad)
    assert y.grad_fn is not None and type(y.grad_fn).__name__ == "RotaryBackward"
    assert y.dtype == ref.dtype and torch.equal(y, ref)
    assert gx.dtype == x.dtype and torch.equal(gx, ref_gx)


def test_rotary_falls_back_where_the_c_function_does_not_apply():
    x = torch.randn(2, 3, 4, 8).transpose(1, 2)  # not contiguous
    ang = torch.randn(2, 4, 8)
    cos, sin = ang.cos()[:, :, None], ang.sin()[:, :, None]
    y = lean_ops.rotary(x.requires_grad_(), cos, sin, rotate_half)
    assert type(y.grad_fn).__name__ != "RotaryBackward"
    assert torch.equal(y, x * cos + rotate_half(x) * sin)
    h = torch.randn(2, 4, 3, 8, dtype=torch.float16)
    assert torch.equal(lean_ops.rotary(h, cos, sin, rotate_half), h * cos + rotate_half(h) * sin)


def test_training_log_probs_and_gradients_are_unchanged_by_the_c_rotary(pol, prompts, monkeypatch):
    """completion_logprobs through fastlm with the C rotary and with the torch ops: the same log-probs and the same
    parameter gradients, bit for bit."""
    batch = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=6, seed=0))

    def run():
        pol.model.zero_grad()
        lp = completion_logprobs(pol.model, prompts, batch.prompt_index, batch.tokens, batch.mask)
        lp.sum().backward()
        return lp.detach(), [p.grad.clone() for p in pol.model.parameters() if p.grad is not None]

    calls = []
    real = lean_ops.Rotary.apply
    monkeypatch.setattr(lean_ops.Rotary, "apply", lambda *a: calls.append(1) or real(*a))
    lp_c, grads_c = run()
    assert calls
    monkeypatch.setattr(cattn, "rope_applies", lambda x, cos: False)
    lp_t, grads_t = run()
    pol.model.zero_grad()
    assert torch.equal(lp_c, lp_t) and all(torch.equal(a, b) for a, b in zip(grads_c, grads_t))


def test_a_damaged_build_in_the_cache_is_built_again(monkeypatch, tmp_path):
    """A library file cut short (a full disk, a killed copy) by another process is replaced, not trusted."""
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path))
    monkeypatch.setattr(cattn, "_state", {})
    path = cattn.library_path(cattn._compiler())
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x7fELF cut short")
    assert cattn.kernel() is not None and path.stat().st_size > 1000


def test_a_forked_child_splits_rows_over_threads_of_its_own():
    """The thread pool of a parent that forked holds threads the child does not have: the child makes its own."""
    def attend_once():
        B, P, Hkv, H, D, Lp, T = 40, 2, 1, 1, 8, 2, 2
        Kg, Vg = torch.zeros(B, Hkv, T, D), torch.zeros(B, Hkv, T, D)
        return cattn.attend(torch.randn(B, 3 * D), H, Hkv, None, (torch.randn(P, 1, Lp, D), torch.randn(P, 1, Lp, D)),
                            torch.zeros(P, Lp), (Kg, Vg), 0, None, torch.arange(B) % P, 1.0)

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        attend_once()  # the parent's pool exists now
        pid = os.fork()
        if pid == 0:  # the child: exit code 0 only if the split call returns
            try:
                attend_once()
                os._exit(0)
            except BaseException:
                os._exit(1)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:  # the child hangs (waiting on threads it does not have): fail, not hang the suite
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert done[0] != 0 and os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        torch.set_num_threads(threads)
