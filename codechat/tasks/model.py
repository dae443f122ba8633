"""The task data model: one problem = a prompt plus the tests that decide whether an answer is right."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codechat.tasks.stdio import StdioSpec

from codechat.tasks.errors import TaskFormatError

__all__ = ["Task", "TaskFormatError"]


@dataclass
class Task:
    task_id: str
    """Unique id within its file (kept as a string; MBPP's integer ids become "11")."""
    prompt: str
    """What the model sees: the question, or for HumanEval-style tasks the code to continue."""
    tests: list[str]
    """Test code. Each item is an `assert` statement or a whole test script; all must pass."""
    entry_point: str | None = None
    """Name of the function under test, when there is one (used to pick the right code block)."""
    setup: str = ""
    """Code run before the candidate (imports, MBPP's test_setup_code); the candidate cannot see the tests."""
    timeout_s: float | None = None
    """Per-task time limit in seconds; None means the verifier's default."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Everything else: `solution` (reference code), `source` format, and for evalplus files
    `base_input`, `plus_input`, `atol` (expected outputs come from running the reference); for answer tasks
    `answer` (the reference final answer) and `accepted` (other accepted forms)."""
    kind: str = "function"
    """How the task is judged: `function` (a program runs against `tests` in the sandbox), `stdio` (the program
    reads stdin and writes stdout, compared with `stdio`'s pairs), `answer` (the completion's final answer is
    compared with `metadata["answer"]` / `metadata["accepted"]` by codechat/verifier/answer.py; `tests` empty)."""
    stdio: "StdioSpec | None" = None
    """For stdin/stdout tasks: the (input, expected output) tests and how to compare them (tasks/stdio.py);
    `tests` is then empty. None for other kinds."""

    def __post_init__(self):
        if self.stdio is not None:  # the spec decides: a task built with one is a stdin/stdout task
            self.kind = "stdio"

    @property
    def solution(self) -> str | None:
        """The reference solution, when the source has one."""
        return self.metadata.get("solution")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)
