"""`/test` with `input:` / `output:` blocks runs the last answer as a stdin/stdout program."""
import pytest

from codechat import CodechatError
from codechat.chat.session import ChatSession, Turn
from codechat.chat.stdio_test import parse_io_tests
from codechat.config import ModelConfig, SamplingConfig, VerifierConfig


@pytest.fixture(scope="module")
def session():
    from codechat.policy import load_policy

    s = ChatSession(load_policy(ModelConfig(path="tiny", device="cpu")), SamplingConfig(max_new_tokens=8),
                    VerifierConfig(workers=1, timeout_s=2))
    yield s
    s.close()


def test_io_pairs_are_judged_like_training(session):
    session.turns = [Turn("Add two numbers from stdin.", "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
                          "stop")]
    lines = iter(["input:", "1 2", "output:", "3", "input:", "2 2", "output:", "5", ""])
    out = session.handle("/test", read_line=lambda prompt: next(lines)).splitlines()
    assert out[0] == "PASS  input '1 2' -> output '3'"
    assert out[1].startswith("FAIL  input '2 2' -> output '5'    [failed: WrongAnswer")
    assert out[2] == "1/2 passed"
    assert session.turns[-1].tests == []  # asserts only are kept for /save


def test_parse_io_tests():
    (t,) = parse_io_tests("input:\n3\n1 2 3\noutput:\n6")
    assert (t.input, t.output) == ("3\n1 2 3\n", "6\n")
    assert parse_io_tests("assert f(1) == 2") is None
    with pytest.raises(CodechatError, match="needs an 'output:' block"):
        parse_io_tests("input:\n1")
