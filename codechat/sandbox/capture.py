"""Run one program on a given stdin in the sandbox and capture its stdout, stderr and exit status.

    from codechat.sandbox.capture import capture_job, captured
    r = captured(pool.run(capture_job(code, stdin=b"1 2\\n", timeout_s=5, memory_mb=512)))
    r.status, r.return_code, r.stdout, r.stderr     # "finished", 0, "3\\n", ""

The program runs exactly as a stdin/stdout test does (stdio_run.py: fresh `__main__`, every sandbox
protection on), but nothing is judged: the output comes back to the caller (`codechat serve`'s `/run_code`).
Exit codes are those of `python main.py`: 0, the program's own `exit(n)`, 1 for an uncaught exception
(MemoryError included: `memory` tells it apart), -N when killed by signal N. The stderr kept is the first
4 KiB the supervisor saw.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from codechat.sandbox.isolation import Limits
from codechat.sandbox.pool import Job, RunResult
from codechat.sandbox.stdio_run import EXIT, RAISED, SIGNAL

CAPTURE_STATUSES = ("finished", "timeout", "compile_error", "output_limit", "sandbox_error")
"""finished: the program ran to its exit (any exit code); timeout: wall-clock or CPU limit; compile_error: it does
not compile (nothing ran); output_limit: it printed more than the cap; sandbox_error: the sandbox failed, not
the program (says nothing about it)."""


@dataclass(frozen=True)
class Captured:
    status: str
    """One of CAPTURE_STATUSES."""
    return_code: int | None = None
    """The exit code when the program ran to its exit (see the module docstring), else None."""
    stdout: str = ""
    """Everything the program wrote to fd 1 (up to the cap), decoded as UTF-8 with replacement."""
    stderr: str = ""
    """The head of what it wrote to fd 2 (the compiler's message for compile_error)."""
    wall_s: float = 0.0
    """Wall-clock seconds the program ran (the kernel's measure when it reached its exit)."""
    cpu_s: float = 0.0
    """CPU seconds (user + system) of the program process."""
    memory: bool = False
    """It ended on an uncaught MemoryError (the address-space limit)."""


def capture_job(code: str, stdin: bytes = b"", timeout_s: float = 5.0, memory_mb: int = 1024,
                max_stdout_bytes: int = 1 << 20, max_stderr_bytes: int = 65536) -> Job:
    """The sandbox job that runs `code` as `__main__` on `stdin` and returns its output (see `captured`)."""
    limits = Limits(cpu_s=int(math.ceil(timeout_s)) + 1, memory_mb=memory_mb)
    return Job("stdio", code, timeout_s=float(timeout_s), limits=limits, stdin=bytes(stdin),
               stdio={"capture": True}, max_output_bytes=max_stderr_bytes, max_result_bytes=max_stdout_bytes)


def captured(r: RunResult) -> Captured:
    """The capture of one `capture_job`'s RunResult."""
    stderr = r.output_head
    if r.status == "ok" and len(r.outputs) == 5:
        stdout, kind, value, cpu, wall = r.outputs
        if kind == EXIT:
            code = int(value)
        elif kind == RAISED:
            code = 1
        elif kind == SIGNAL:
            code = -int(value)
        else:
            return Captured("sandbox_error", stderr="malformed exit report")
        return Captured("finished", code, str(stdout), stderr, float(wall), float(cpu), kind == RAISED and bool(value))
    if r.status == "timeout":
        return Captured("timeout", None, "", stderr, r.duration_s)
    if r.status == "output_limit":
        return Captured("output_limit", None, "", stderr, r.duration_s)
    if r.status in ("syntax_error", "error") and r.error_type not in ("EarlyExit", "JudgeError", "SandboxError"):
        return Captured("compile_error", None, "", r.message, r.duration_s)
    if r.status == "memory":
        return Captured("finished", 1, "", stderr or "MemoryError", r.duration_s, memory=True)
    if r.status == "error" and r.error_type == "EarlyExit":  # killed before reporting (e.g. by a signal)
        return Captured("finished", -9, "", (stderr + "\n" + r.message).strip(), r.duration_s)
    return Captured("sandbox_error", None, "", r.message, r.duration_s)
