"""Shared by tests/test_policy*.py and tests/test_sampler*.py: one tiny local model per test session."""
from __future__ import annotations

from pathlib import Path

import pytest

_BUILT: dict[str, Path] = {}

# Prompts of different lengths (so left padding is exercised), shared by the sampler and decoder tests.
PROMPT_TEXTS = ["def add(a, b):\n", "x = [1, 2, 3]\nfor i in x:\n    print(i)\n",
                "Write a function `f(s)` that reverses s.\n"]

# 2 layers, 1k vocabulary trained on ~300 kB: builds in well under a second.
TINY = dict(num_layers=2, vocab_size=1024, corpus_bytes=300_000)


def tiny_dir(tmp_path_factory) -> Path:
    from codechat.policy import build_preset

    if "tiny" not in _BUILT:
        _BUILT["tiny"] = build_preset("tiny", tmp_path_factory.mktemp("tiny"), seed=0, **TINY)
    return _BUILT["tiny"]


def tiny_policy(tmp_path_factory, **kw):
    from codechat.config import ModelConfig
    from codechat.policy import load_policy

    return load_policy(ModelConfig(path=str(tiny_dir(tmp_path_factory)), device="cpu", **kw))


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    """The tiny policy, loaded once per test module (import this fixture with `prompts`)."""
    return tiny_policy(tmp_path_factory)


@pytest.fixture(scope="module")
def prompts(pol):
    """PROMPT_TEXTS encoded by `pol`."""
    return [pol.encode_prompt(t) for t in PROMPT_TEXTS]
