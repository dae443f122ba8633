"""sampling.packed_weights: the lean decode step's matmuls on oneDNN-packed weights sample what F.linear samples."""
import pytest
import torch

from codechat.config import ModelConfig, SamplingConfig
from codechat.policy import Sampler, cattn, decoding, load_policy, packed
from codechat.policy.precision import bf16_native
from policy_helpers import pol, prompts  # noqa: F401 - fixtures (the tiny policy, PROMPT_TEXTS encoded)
from qwen_helpers import qwen_policy

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


def count_packed(monkeypatch) -> list:
    calls = []
    orig = packed.linear

    def counted(x, w, b=None):
        calls.append(x.shape[0])
        return orig(x, w, b)

    monkeypatch.setattr(packed, "linear", counted)
    return calls


def test_packed_weights_sample_the_same_tokens(pol, prompts, monkeypatch):
    """Samples end at EOS at various steps, so the batch is compacted along the way; tokens, texts and finishes
    are F.linear's, log-probs agree to float rounding, for several seeds."""
    eos = tuple(range(100, 200))  # ~10% of the vocabulary ends a sample
    early = type(pol)(**{**pol.__dict__, "eos_token_ids": eos})
    calls = count_packed(monkeypatch)
    for seed in (0, 1, 2):
        before = len(calls)
        plain = Sampler(early).sample(prompts, 4, SamplingConfig(max_new_tokens=40, seed=seed, packed_weights=False))
        assert len(calls) == before  # the setting off: F.linear
        fast = Sampler(early).sample(prompts, 4, SamplingConfig(max_new_tokens=40, seed=seed))
        assert len(calls) > before  # on by default at 12 rows
        assert torch.equal(plain.tokens, fast.tokens), seed
        assert plain.finish_reason == fast.finish_reason and plain.texts == fast.texts
        assert (plain.logprobs - fast.logprobs).abs().max() < 1e-5
        assert len(set(fast.n_tokens.tolist())) > 2
    assert min(calls) < 12  # some steps ran after finished rows were dropped


def test_packed_weights_with_rows_joining_mid_decode(pol, prompts, monkeypatch):
    """rollout.max_rows: the next prompt's rows join the packed batch as slots free up; same tokens as F.linear."""
    eos = tuple(range(100, 200))
    early = type(pol)(**{**pol.__dict__, "eos_token_ids": eos})
    calls = count_packed(monkeypatch)
    cfg = dict(max_new_tokens=40, seed=5, top_k=40)
    plain = Sampler(early, max_rows=8).sample(prompts, 4, SamplingConfig(**cfg, packed_weights=False))
    fast = Sampler(early, max_rows=8).sample(prompts, 4, SamplingConfig(**cfg))
    assert calls and torch.equal(plain.tokens, fast.tokens) and plain.texts == fast.texts
    assert (plain.logprobs - fast.logprobs).abs().max() < 1e-5


def test_small_batches_and_short_calls_keep_f_linear(pol, prompts, monkeypatch):
    """Fewer than packed.MIN_ROWS rows, or fewer than packed.MIN_TOKENS rows x new tokens: the reorder would not
    pay, so nothing is packed."""
    calls = count_packed(monkeypatch)
    Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=64, seed=0))  # 6 rows
    Sampler(pol).sample(prompts, 4, SamplingConfig(max_new_tokens=8, seed=0))  # 12 rows x 8 tokens
    assert not calls
    Sampler(pol).sample(prompts, 4, SamplingConfig(max_new_tokens=32, seed=0))  # 12 x 32
    assert calls


@pytest.mark.parametrize("layout", [10_000, -1, "c-kernel"])  # the per-row cache, the shared-prompt grid (FLAT_PROMPT)
@torch.inference_mode()
def test_packed_logits_match_a_plain_forward(pol, prompts, layout, monkeypatch):
    """Each packed step's logits equal the model's forward over the row's whole sequence, through a compaction;
    also with the step's attention, norms and SiLU in C (cattn.py)."""
    native = layout == "c-kernel"
    if native and cattn.kernel() is None:
        pytest.skip(f"no C kernel here: {cattn.unavailable_reason()}")
    monkeypatch.setattr(decoding, "FLAT_PROMPT", 10_000 if native else layout)
    monkeypatch.setattr(packed, "MIN_TOKENS", 1)

    def check(step, logits, seqs):
        ref = torch.stack([pol.model(torch.tensor([s])).logits[0, -1] for s in seqs])  # (B, V)
        assert (logits - ref).abs().max() < 1e-4, f"step {step}"

    dec = decoding.make_decoder(pol.model, pack=True, native=native)
    walk(dec, prompts, check)
    assert dec.kernel == native


def walk(dec, prompts, check, n: int = 3, steps: int = 6):
    """Prefill n rows per prompt on packed weights, then `steps` random tokens, dropping rows after the third;
    check(step, logits (B, V), seqs) sees each step's logits and the rows' whole sequences."""
    P, Lp = len(prompts), max(map(len, prompts))
    ids = torch.tensor([[0] * (Lp - len(p)) + p for p in prompts])
    valid = torch.tensor([[False] * (Lp - len(p)) + [True] * len(p) for p in prompts])
    index = torch.arange(P).repeat_interleave(n)
    logits = dec.prefill(ids, valid, index, 8)
    assert dec.fast.packed is not None
    seqs = [list(prompts[p]) for p in index.tolist()]
    g = torch.Generator().manual_seed(0)
    for step in range(steps):
        check(step, logits, seqs)
        tok = torch.randint(0, logits.shape[1], (len(seqs),), generator=g)
        seqs = [s + [t] for s, t in zip(seqs, tok.tolist())]
        if step == 2:
            keep = torch.tensor([0, 2, 3, 5, 6, 8])
            dec.select(keep)
            tok, seqs = tok[keep], [seqs[i] for i in keep.tolist()]
        logits = dec.step(tok)


@torch.inference_mode()
def test_packed_logits_with_qkv_biases(monkeypatch):
    """A Qwen2-shaped model (q/k/v biases, grouped-query attention, tied head): the bias rides in the packed call."""
    monkeypatch.setattr(packed, "MIN_ROWS", 1)
    monkeypatch.setattr(packed, "MIN_TOKENS", 1)
    pol = qwen_policy("qwen2.5")
    dec = decoding.make_decoder(pol.model, pack=True)
    prompts = [pol.encode_prompt("def add(a, b):"), pol.encode_prompt("Reverse a string s in Python, please.")]
    Lp = max(map(len, prompts))
    ids = torch.tensor([[0] * (Lp - len(p)) + p for p in prompts])
    valid = torch.tensor([[False] * (Lp - len(p)) + [True] * len(p) for p in prompts])
    logits = dec.prefill(ids, valid, torch.tensor([0, 0, 1]), 4)
    assert dec.fast.packed is not None
    seqs = [list(prompts[0]), list(prompts[0]), list(prompts[1])]
    for step, tok in enumerate(torch.tensor([[11, 12, 13], [220, 5, 99], [7, 7, 7]])):
        ref = torch.stack([pol.model(torch.tensor([s])).logits[0, -1] for s in seqs])
        assert (logits - ref).abs().max() < 1e-4, f"step {step}"
        seqs = [s + [t] for s, t in zip(seqs, tok.tolist())]
        logits = dec.step(tok)


@pytest.mark.slow
def test_packed_weights_on_the_tiny_preset():
    """The built-in tiny preset (4 layers, 4k vocabulary): 4 prompts x 8 samples, the same tokens as F.linear."""
    pol = load_policy(ModelConfig(path="tiny", device="cpu"))
    prompts = [pol.encode_prompt(t) for t in ["def add(a, b):\n", "Write a function `rev(s)`.\n",
                                              "def count_evens(xs):\n", "def flatten(nested):\n"]]
    for seed in (0, 1):
        plain = Sampler(pol).sample(prompts, 8, SamplingConfig(max_new_tokens=64, seed=seed, packed_weights=False))
        fast = Sampler(pol).sample(prompts, 8, SamplingConfig(max_new_tokens=64, seed=seed))
        assert torch.equal(plain.tokens, fast.tokens), seed
        assert (plain.logprobs - fast.logprobs).abs().max() < 1e-5


@pytest.mark.skipif(not bf16_native("cpu"), reason="no native bf16 on this CPU")
@pytest.mark.parametrize("layout", [10_000, -1, "c-kernel"])  # the per-row cache, the shared-prompt grid (FLAT_PROMPT)
@torch.inference_mode()
def test_packed_bf16_steps_match_the_autocast_forward(pol, prompts, layout, monkeypatch):
    """model.compute_dtype=bfloat16: inside CPU autocast the lean step runs on bf16 packed copies, and each step's
    logits are the model's own autocast forward over the whole sequence up to bf16 rounding, not fp32's; also
    with its attention, norms and SiLU in C (cattn.py)."""
    native = layout == "c-kernel"
    if native and cattn.kernel() is None:
        pytest.skip(f"no C kernel here: {cattn.unavailable_reason()}")
    monkeypatch.setattr(decoding, "FLAT_PROMPT", 10_000 if native else layout)
    monkeypatch.setattr(packed, "MIN_TOKENS", 1)
    gaps, fp32_gaps = [], []

    def check(step, logits, seqs):
        ref = torch.stack([pol.model(torch.tensor([s])).logits[0, -1] for s in seqs]).float()  # autocast's
        with torch.autocast("cpu", enabled=False):
            fp32 = torch.stack([pol.model(torch.tensor([s])).logits[0, -1] for s in seqs])
        if step:  # the steps after the prefill (the prefill is the model's own forward)
            scale = fp32.abs().max()
            gaps.append(((logits.float() - ref).abs().max() / scale).item())
            fp32_gaps.append(((logits.float() - fp32).abs().max() / scale).item())

    with torch.autocast("cpu", dtype=torch.bfloat16):
        dec = decoding.make_decoder(pol.model, pack=True, native=native)
        walk(dec, prompts, check)
    assert dec.lean and dec.fast.packed.dtype == torch.bfloat16 and dec.kernel == native
    assert max(gaps) < 2e-2, gaps
    assert min(fp32_gaps) > 1e-4, fp32_gaps  # it computes in bf16
