"""`Verdict`: the typed result of running one completion against its task's tests.

It is the boundary between the sandbox (which knows programs) and rewards/training (which know numbers).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

STATUSES = ("passed", "failed", "error", "syntax_error", "timeout", "memory", "no_code", "output_limit", "infra_error",
            "no_answer")
"""The closed set of outcomes:
passed        every test ran and passed (attested by the verifier, not by the program)
failed        the code ran, at least one test's assertion failed
error         an exception other than a failed assertion (NameError, TypeError, ...), or the program exited early
syntax_error  the extracted code does not parse
timeout       wall-clock or CPU limit reached
memory        memory limit reached (MemoryError or the address-space cap)
no_code       the completion holds no code to run
output_limit  the program printed more than the output cap
infra_error   the verifier failed, not the program (a sandbox or Ray worker lost, a pool replaced): says nothing
              about the completion; training leaves it out of the loss and the advantages (rollout/collect.py)
no_answer     answer tasks: no final answer found in the completion (failed = found but not equivalent;
              timeout = the comparison ran past its limit; error = the comparison library failed)
"""


@dataclass(frozen=True)
class Verdict:
    status: str
    """One of STATUSES."""
    passed: bool
    """True only when status == 'passed'."""
    reward: float
    """1.0 if passed else 0.0 (rewards.py composes richer rewards from the other fields)."""
    tests_passed: int = 0
    """Tests that ran and passed (one per assert when the tests are asserts)."""
    tests_total: int = 0
    """Tests the task has."""
    error_type: str | None = None
    """Exception class name when the program raised, e.g. 'AssertionError', 'NameError'."""
    message: str = ""
    """Short human-readable detail (first line of the error, truncated)."""
    duration_s: float = 0.0
    """Wall-clock time the program ran."""
    blocked: tuple[str, ...] = field(default_factory=tuple)
    """Protections the program ran into: 'network', 'subprocess', 'signal', 'write_outside', ... (for safety rewards)."""
    cpu_s: float = 0.0
    """CPU time the program used (user + system, from the kernel); stdin/stdout tasks, and function tasks
    under verifier.cpu_time_limit; else 0."""
    thought: bool = False
    """The completion had a non-blank thinking block (verifier.thinking on; it was stripped before extraction)."""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["blocked"] = list(self.blocked)
        return d
