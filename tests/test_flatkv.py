"""The decode step's two KV layouts (per-row cache, shared-prompt grid) against the model's own plain forward."""
import pytest
import torch

from codechat.config import SamplingConfig
from codechat.policy import Sampler, cattn, decoding, flatkv
from policy_helpers import pol, prompts  # noqa: F401 - fixtures (the tiny policy, PROMPT_TEXTS encoded)
from qwen_helpers import qwen_policy

LAYOUTS = {"per-row": 10_000, "shared-prompt": -1, "c-kernel": 10_000}  # decoding.FLAT_PROMPT for each
needs_kernel = pytest.mark.skipif(cattn.kernel() is None, reason=f"no C kernel here: {cattn.unavailable_reason()}")


@pytest.mark.parametrize("layout,chunk", [("per-row", 32), ("per-row", 3), ("shared-prompt", 32),
                                          pytest.param("c-kernel", 32, marks=needs_kernel)])
@torch.inference_mode()
def test_decode_logits_match_a_plain_forward(pol, prompts, layout, chunk, monkeypatch):
    """Each step's logits equal the model's forward over the row's whole unpadded sequence, through a compaction
    (finished rows dropped) and, for the per-row cache and the C kernel, a row added mid-decode; with 3-column
    chunks the per-row cache grows twice, once before and once after the row joins."""
    monkeypatch.setattr(decoding, "FLAT_PROMPT", LAYOUTS[layout])
    monkeypatch.setattr(flatkv, "CHUNK", chunk)
    dec = decoding.make_decoder(pol.model, native=layout == "c-kernel")
    P, n, Lp = len(prompts), 2, max(map(len, prompts))
    ids = torch.tensor([[0] * (Lp - len(p)) + p for p in prompts])
    valid = torch.tensor([[False] * (Lp - len(p)) + [True] * len(p) for p in prompts])
    index = torch.arange(P).repeat_interleave(n)
    logits = dec.prefill(ids, valid, index, 8)
    assert (dec.flat is not None) == (layout == "per-row") and dec.kernel == (layout == "c-kernel")
    if dec.flat is not None:  # generated columns are allocated a chunk at a time, the budget kept apart
        assert dec.flat.k[0].shape[2] == Lp + min(8, chunk) and dec.columns == 8
    seqs = [list(prompts[p]) for p in index.tolist()]
    g = torch.Generator().manual_seed(0)
    for step in range(7):
        ref = torch.stack([pol.model(torch.tensor([s])).logits[0, -1] for s in seqs])  # (B, V)
        assert (logits - ref).abs().max() < 1e-4, f"step {step}"
        tok = torch.randint(0, ref.shape[1], (len(seqs),), generator=g)
        for s, t in zip(seqs, tok.tolist()):
            s.append(t)
        if step == 2:  # rows 1 and 4 finished: keep the others
            keep = torch.tensor([0, 2, 3, 5])
            dec.select(keep)
            tok, seqs = tok[keep], [seqs[i] for i in keep.tolist()]
        logits = dec.step(tok)
        if step == 4 and layout != "shared-prompt":  # a new prompt, longer than the others, joins with two rows
            new = prompts[1] + prompts[0]
            added = dec.add(torch.tensor([new]), torch.ones(1, len(new), dtype=torch.bool), 2)
            logits, seqs = torch.cat([logits, added]), seqs + [list(new), list(new)]


@pytest.mark.parametrize("native", [False, pytest.param(True, marks=needs_kernel)])
@torch.inference_mode()
def test_decode_logits_match_a_plain_forward_with_qkv_biases(native):
    """A Qwen2-shaped model (q/k/v biases, grouped-query attention) through the per-row cache or the C kernel."""
    pol = qwen_policy("qwen2.5")
    dec = decoding.make_decoder(pol.model, native=native)
    prompts = [pol.encode_prompt("def add(a, b):"), pol.encode_prompt("Reverse a string s in Python, please.")]
    Lp = max(map(len, prompts))
    ids = torch.tensor([[0] * (Lp - len(p)) + p for p in prompts])
    valid = torch.tensor([[False] * (Lp - len(p)) + [True] * len(p) for p in prompts])
    logits = dec.prefill(ids, valid, torch.tensor([0, 0, 1]), 4)
    assert (dec.flat is None) == native == dec.kernel
    seqs = [list(prompts[0]), list(prompts[0]), list(prompts[1])]
    for step, tok in enumerate(torch.tensor([[11, 12, 13], [220, 5, 99], [7, 7, 7]])):
        ref = torch.stack([pol.model(torch.tensor([s])).logits[0, -1] for s in seqs])
        assert (logits - ref).abs().max() < 1e-4, f"step {step}"
        seqs = [s + [t] for s, t in zip(seqs, tok.tolist())]
        logits = dec.step(tok)


@pytest.mark.parametrize("max_rows", [0, 2])
def test_every_layout_samples_the_same_tokens(pol, prompts, max_rows, monkeypatch):
    """The per-row cache, the shared-prompt grid and the C kernel (sampling.native_kernels, which also draws the
    tokens in C): the same tokens, texts and finishes for the same seed."""
    out = {}
    for layout, width in LAYOUTS.items():
        native = layout == "c-kernel"
        if native and cattn.kernel() is None:
            continue
        cfg = SamplingConfig(max_new_tokens=12, seed=4, top_k=40, stop=["e"], native_kernels=native)
        monkeypatch.setattr(decoding, "FLAT_PROMPT", width)
        out[layout] = Sampler(pol, max_rows=max_rows).sample(prompts, 3, cfg)
    a = out["per-row"]
    for b in out.values():
        assert torch.equal(a.tokens, b.tokens) and a.texts == b.texts and a.finish_reason == b.finish_reason
        assert (a.logprobs - b.logprobs).abs().max() < 1e-4


@pytest.mark.parametrize("chunk,native", [(32, False), (2, False), pytest.param(32, True, marks=needs_kernel)])
def test_keyed_contexts_reuse_kv(pol, prompts, chunk, native, monkeypatch):
    """Growing contexts (one sample per prompt) decode with the per-row cache or the C kernel; the kept KV gives
    the same tokens as a full prefill (also when the cache grew while decoding: 2-column chunks)."""
    monkeypatch.setattr(flatkv, "CHUNK", chunk)
    cfg = SamplingConfig(max_new_tokens=6, seed=1, native_kernels=native)
    s = Sampler(pol)
    first = s.sample(prompts, 1, cfg, keys=["a", "b", "c"])
    grown = [p + t[:k].tolist() + p[:3] for p, t, k in zip(prompts, first.tokens, first.n_tokens.tolist())]
    reused = s.sample(grown, 1, cfg, keys=["a", "b", "c"])
    assert s.prefix.reused_tokens > 0
    fresh = Sampler(pol).sample(grown, 1, cfg)
    assert torch.equal(reused.tokens, fresh.tokens)
    assert (reused.logprobs - fresh.logprobs).abs().max() < 1e-4
