"""A task's own time limit, as the verifier applies it: validated, and never above the operator's maximum.

A task record may carry `timeout_s` (function tasks: the whole program; stdin/stdout tasks: each test). Records
can come from a client over the network, so the value is untrusted: `task_timeout` turns it into the limit
the sandbox gets. Absent (None or 0): the verifier's `timeout_s`. Not a positive number (NaN, infinite,
negative, a string): a one-line `TaskLimitError` naming the task, which the verifier reports as that task's
`error` verdict (the rest of the batch is judged). Above `verifier.max_task_timeout_s` (1e10, 1e300):
clamped to it, so one client's record cannot hold a worker longer than the operator allows
(`codechat serve --max-task-timeout` sets it).
"""
from __future__ import annotations

import math
from numbers import Real

from codechat import CodechatError


class TaskLimitError(CodechatError):
    """A task's own limit is not a positive number of seconds."""


def task_timeout(value: object, default_s: float, max_s: float, task_id: str = "") -> float:
    """The time limit, in seconds, for a task whose record asks for `value` (see the module's docstring)."""
    if value is None or (isinstance(value, Real) and not isinstance(value, bool) and value == 0):
        return float(default_s)  # (the operator's own limit)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)) or value <= 0:
        raise TaskLimitError(f"task {task_id}: timeout_s must be a positive number of seconds, got {value!r}"[:300])
    return min(float(value), float(max_s))
