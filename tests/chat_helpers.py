"""Fixtures shared by the chat tests (test_chat.py, test_chat_run.py): the tiny preset, one sandboxed session, planted
answers."""
from __future__ import annotations

import pytest
import torch

from codechat.chat.session import ChatSession, Turn
from codechat.config import ModelConfig, SamplingConfig, VerifierConfig
from codechat.policy import load_policy


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: one-token decoding steps are far faster without thread hand-offs on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def policy():
    """The tiny preset (built once into the cache; the terminal test needs it anyway)."""
    return load_policy(ModelConfig(path="tiny", device="cpu"))


@pytest.fixture(scope="module")
def sandbox_session(policy):
    """One session whose sandbox workers are shared by the /run and /test tests."""
    s = ChatSession(policy, SamplingConfig(max_new_tokens=8), VerifierConfig(workers=1, timeout_s=2))
    yield s
    s.close()


@pytest.fixture
def planted(sandbox_session):
    """Plant an answer as if the model had said it."""
    def plant(answer: str, question: str = "q") -> ChatSession:
        sandbox_session.turns = [Turn(question, answer, "stop")]
        return sandbox_session
    return plant


def fence(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```\nDone."
