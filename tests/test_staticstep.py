"""sampling.compile: the static-shape decode step under torch.compile samples what the eager decoder samples."""
import pytest
import torch

from codechat.config import ModelConfig, SamplingConfig
from codechat.policy import Sampler, completion_logprobs, load_policy, staticstep
from policy_helpers import pol, prompts  # noqa: F401 - fixtures (the tiny policy, PROMPT_TEXTS encoded)


def count_static_steps(monkeypatch) -> list:
    calls = []
    orig = staticstep.StaticStep.__call__

    def counted(self, *a):
        calls.append(a[0].shape[0])  # the batch rows of this step
        return orig(self, *a)

    monkeypatch.setattr(staticstep.StaticStep, "__call__", counted)
    return calls


def test_compiled_step_samples_the_same_tokens_as_eager(pol, prompts, monkeypatch):
    """Samples end at EOS at various steps, so the batch shrinks through its buckets (finished rows fill them);
    tokens are equal and log-probs agree to float rounding, for several seeds."""
    eos = tuple(range(100, 200))  # ~10% of the vocabulary ends a sample
    early = type(pol)(**{**pol.__dict__, "eos_token_ids": eos})
    calls = count_static_steps(monkeypatch)
    for seed in (0, 1, 2):
        before = len(calls)
        eager = Sampler(early).sample(prompts, 4, SamplingConfig(max_new_tokens=40, seed=seed))
        assert len(calls) == before  # the default decodes eagerly
        compiled = Sampler(early).sample(prompts, 4, SamplingConfig(max_new_tokens=40, seed=seed, compile=True))
        assert torch.equal(eager.tokens, compiled.tokens), seed
        assert eager.finish_reason == compiled.finish_reason and eager.texts == compiled.texts
        assert (eager.logprobs - compiled.logprobs).abs().max() < 1e-5
        assert len(set(eager.n_tokens.tolist())) > 2
    assert calls and set(calls) <= {12, 8, 4, 2, 1} and len(set(calls)) > 1  # the start, then buckets
    lp = completion_logprobs(pol.model, prompts, compiled.prompt_index, compiled.tokens, compiled.mask)
    assert (lp - compiled.logprobs).abs().max() < 1e-4


def test_continuous_batching_keeps_the_eager_step(pol, prompts, monkeypatch):
    """Rows joining mid-decode change the batch at every admission: sampling.compile leaves those batches eager,
    with the same tokens."""
    calls = count_static_steps(monkeypatch)
    cfg = SamplingConfig(max_new_tokens=12, seed=3, compile=True)
    a = Sampler(pol, max_rows=2).sample(prompts, 2, cfg)
    b = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=12, seed=3))
    assert not calls and torch.equal(a.tokens, b.tokens)


def test_a_failed_compile_falls_back_to_the_eager_step(pol, prompts, monkeypatch, caplog):
    """No C++ compiler for inductor (or any compile failure): a warning, then the same tokens, decoded eagerly."""
    class InductorError(RuntimeError):
        pass

    def broken(*args):
        raise InductorError("C++ compile error: no compiler")

    monkeypatch.setitem(staticstep._COMPILED, "step", broken)
    a = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=6, seed=0, compile=True))
    b = Sampler(pol).sample(prompts, 2, SamplingConfig(max_new_tokens=6, seed=0))
    assert torch.equal(a.tokens, b.tokens) and "decoding eagerly" in caplog.text
    assert staticstep._COMPILED["step"] is staticstep.step


def test_buckets_and_widths():
    assert [staticstep.bucket(n) for n in (1, 2, 3, 5, 8, 9, 31, 32, 33)] == [1, 2, 4, 8, 8, 16, 32, 32, 64]
    assert [staticstep.width(n) for n in (1, 64, 65, 98)] == [64, 64, 128, 128]


@pytest.mark.slow
def test_compiled_step_on_the_tiny_preset():
    """The built-in tiny preset (4 layers, 4k vocabulary): 4 prompts x 8 samples, the same tokens as eager."""
    pol = load_policy(ModelConfig(path="tiny", device="cpu"))
    prompts = [pol.encode_prompt(t) for t in ["def add(a, b):\n", "Write a function `rev(s)`.\n",
                                              "def count_evens(xs):\n", "def flatten(nested):\n"]]
    for seed in (0, 1):
        eager = Sampler(pol).sample(prompts, 8, SamplingConfig(max_new_tokens=64, seed=seed))
        compiled = Sampler(pol).sample(prompts, 8, SamplingConfig(max_new_tokens=64, seed=seed, compile=True))
        assert torch.equal(eager.tokens, compiled.tokens), seed
        assert (eager.logprobs - compiled.logprobs).abs().max() < 1e-5
