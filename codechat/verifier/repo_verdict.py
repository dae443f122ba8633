"""A repository judgement's outcome: `RepoVerdict` and its STATUSES, and how it maps onto the function-task
`Verdict` that rewards read."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from codechat.verifier.verdict import Verdict

STATUSES = ("passed", "failed", "no_tests", "timeout", "error", "rejected", "env_error")
"""passed: required tests pass and nothing broke; failed: a required or previously passing test failed;
no_tests: the hidden files yielded no test; timeout: the test run hit its wall clock; error: the change could
not be applied or the runner did not report (early exit, crash); rejected: the change tampers with the runner
(found in its text, or refused or found changed by the runner's guard during the run); env_error: the
environment could not run the tests (no environment for the repository, no pytest in it, a module the tree does
not hold missing at collection, an INTERNALERROR or usage error that the untouched base meets too, a FAIL_TO_PASS
test that needs the internet): says nothing about the patch, left out of the loss like `infra_error`. A run the
change breaks (the base runs the same tests) is `failed`."""


@dataclass
class RepoVerdict:
    status: str
    """One of STATUSES."""
    passed: bool
    """True only when status == 'passed'."""
    reward: float
    """1.0 if passed else 0.0."""
    tests_passed: int = 0
    """Tests of the final run that passed."""
    tests_total: int = 0
    """Tests the final run collected."""
    failed_tests: list[str] = field(default_factory=list)
    """Required tests that did not pass (at most 20)."""
    broken_tests: list[str] = field(default_factory=list)
    """Tests that passed on the base and fail after the change (at most 20)."""
    dropped: list[str] = field(default_factory=list)
    """`path: reason` for every change discarded (protected path, shadow module, hidden test file)."""
    applied: list[str] = field(default_factory=list)
    """Paths the change actually modified in the clean copy."""
    message: str = ""
    """One line of detail."""
    output_tail: str = ""
    """The last lines of the test run's output (its end: pytest's summary)."""
    duration_s: float = 0.0
    fail_to_pass: dict = field(default_factory=dict)
    """{"passed", "failed", "unknown"}: the task's FAIL_TO_PASS ids by result (`unknown`: matched no test)."""
    pass_to_pass: dict = field(default_factory=dict)
    """The same for PASS_TO_PASS (or the visible tests passing on the base)."""
    warnings: list[str] = field(default_factory=list)
    """Ids matched by prefix, ignored or skipped offline, with why."""
    env: str = ""
    """The environment that ran the tests (`repo@version`), or `codechat` for codechat's own interpreter."""

    def to_dict(self) -> dict:
        return asdict(self)

    def verdict(self) -> Verdict:
        """The function-task `Verdict` (for rewards): no_tests counts as failed, rejected as error."""
        status = {"no_tests": "failed", "rejected": "error", "passed": "passed", "failed": "failed",
                  "timeout": "timeout", "env_error": "infra_error"}.get(self.status, "error")
        return Verdict(status, self.passed, self.reward, self.tests_passed, self.tests_total,
                       None if self.passed else self.status, self.message, self.duration_s)
