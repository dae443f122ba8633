"""`/test` for stdin/stdout answers: paste `input:` / `output:` blocks instead of asserts.

    /test
    ... input:
    ... 1 2
    ... output:
    ... 3
    ...

Each (input, output) pair runs the last answer as a program, as a stdin/stdout task does in training (one
fresh process per pair, stdout compared in the judge with trailing whitespace trimmed). Results are shown, not
kept by /save (a saved turn holds asserts only).
"""
from __future__ import annotations

from codechat import CodechatError
from codechat.chat.run import AssertResult
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec


def parse_io_tests(text: str) -> list[IOTest] | None:
    """The pairs of a pasted `input:` / `output:` text, or None when the text is not in that form (asserts)."""
    lines = text.split("\n")
    if not lines or lines[0].strip().lower() != "input:":
        return None
    pairs, part, cur = [], None, {"input": [], "output": []}
    for line in lines:
        tag = line.strip().lower()
        if tag in ("input:", "output:"):
            if tag == "input:" and part == "output":
                pairs.append(cur)
                cur = {"input": [], "output": []}
            part = tag[:-1]
            continue
        cur[part].append(line)
    if part != "output":
        raise CodechatError("/test: each 'input:' block needs an 'output:' block after it")
    pairs.append(cur)
    return [IOTest("\n".join(p["input"]).strip("\n") + "\n", "\n".join(p["output"]).strip("\n") + "\n")
            for p in pairs]


def check_io(verifier, question: str, answer: str, tests: list[IOTest]) -> list[AssertResult]:
    """Each pair on its own against the program the verifier extracts from `answer`."""
    pairs = [(Task(f"chat-io-{i}", question, [], stdio=StdioSpec([t])), answer) for i, t in enumerate(tests)]
    return [AssertResult(f"input {_short(t.input)} -> output {_short(t.output)}", v)
            for t, v in zip(tests, verifier.verify_many(pairs))]


def _short(s: str) -> str:
    s = s.strip()
    return repr(s if len(s) <= 40 else s[:37] + "...")
