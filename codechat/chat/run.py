"""Run the chat's answers in the verifier's sandbox: `/run` (the answer as a script) and `/test` (pasted asserts).

    report = run_program(verifier, code)           # -> RunReport: stdout, stderr, status, exit code, time
    results = check_asserts(verifier, question, answer, "assert add(1, 2) == 3")   # -> [AssertResult]

Same isolation and limits as verification, because it is the verifier's sandbox (codechat/sandbox, see
docs/verifier.md): the program runs in a forked process under its own uid, with no network, private /tmp,
rlimits (CPU, memory, processes, files, file size), a wall-clock limit (VerifierConfig.timeout_s), capped output,
and every process it started is killed afterwards.
Protects the chat against: an answer that kills or signals the chat or its process group, fork bombs, endless
loops, memory hogs, output floods, writes outside its temp dir, network access. The chat process stays up and the
sandbox worker is replaced when it dies.
Does not protect against: what the sandbox itself does not cover (no seccomp, no PID namespace; see
codechat/sandbox/isolation.py); reduced isolation when not running as root (a warning lists what is active).

How `/run` captures output: the sandbox has one pipe for stdout and stderr together and reports its first 2 KiB.
So the answer runs inside a small wrapper function (sandbox `call` mode) that runs it as `__main__`, captures
stdout and stderr separately and returns them as plain data, while also writing through to the pipe; when the
program never returns (timeout, os._exit, a signal, output over the cap) the report shows the pipe's first 2 KiB.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from codechat import CodechatError
from codechat.tasks import Task
from codechat.verifier.verdict import Verdict


@dataclass
class AssertResult:
    """One pasted assert and its verdict against the answer's code."""
    test: str
    """The assert's source."""
    verdict: Verdict
    """The verifier's verdict when the answer runs against this assert alone."""


@dataclass
class RunReport:
    """What `/run` observed: the program's output, how it ended, and how long it took."""
    status: str
    """ok, exit (sys.exit non-zero), error (uncaught exception), timeout, memory, output_limit,
    killed (the process ended abruptly: os._exit, a signal), no_code, sandbox_error."""
    stdout: str = ""
    """What the program printed to stdout (see below when it did not return)."""
    stderr: str = ""
    """What it printed to stderr, including the traceback of an uncaught exception. Separate streams when the program returned normally; when it did not (timeout, killed, output flood),
    `stdout` holds the first 2 KiB of stdout and stderr interleaved and `stderr` is empty."""
    exit_code: int | None = None
    """sys.exit's code (1 after an uncaught exception); None when the program did not return."""
    error_type: str | None = None
    """Exception class name for status error/memory."""
    message: str = ""
    """The sandbox's detail (e.g. 'time limit reached')."""
    duration_s: float = 0.0
    """Wall-clock time of the sandboxed run (start-up of the process included)."""
    blocked: tuple[str, ...] = ()
    """Protections the program ran into (network, subprocess, signal, write_outside, ...)."""

    def render(self, limit: int = 4000) -> str:
        def cut(s: str) -> str:
            return s if len(s) <= limit else s[:limit] + f"\n... ({len(s) - limit} more characters)"
        lines = []
        if self.stdout:
            lines += ["--- stdout", cut(self.stdout).rstrip("\n")]
        if self.stderr:
            lines += ["--- stderr", cut(self.stderr).rstrip("\n")]
        detail = [f"exit code {self.exit_code}"] if self.exit_code is not None else []
        detail += [self.error_type] if self.error_type else []
        detail += [self.message] if self.message else []
        detail += [f"blocked: {', '.join(self.blocked)}"] if self.blocked else []
        lines.append(f"--- status: {self.status} ({'; '.join(detail)})" if detail else f"--- status: {self.status}")
        lines.append(f"--- time: {self.duration_s:.3f} s")
        return "\n".join(lines)


# The program runs inside a function of this wrapper, called by the judge (sandbox `call` mode), so it runs as
# __main__, its stdout and stderr are captured separately, and an exception becomes a traceback on stderr.
# Writes also go through to the real output pipe, whose first 2 KiB the sandbox reports when the program never
# returns (timeout, os._exit, killed, output over the cap).
RUNNER = r'''
def __codechat_run__(src):
    import io, linecache, sys, traceback
    linecache.cache["<answer>"] = (len(src), None, src.splitlines(True), "<answer>")  # source lines in tracebacks

    class Tee(io.StringIO):
        def __init__(self, real):
            super().__init__()
            self.real = real

        def write(self, s):
            try:
                self.real.write(s)
                self.real.flush()
            except BaseException:
                pass
            return super().write(s)

    out, err = Tee(sys.__stdout__), Tee(sys.__stderr__)
    sys.stdout, sys.stderr = out, err
    code, etype = 0, None
    try:
        exec(compile(src, "<answer>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
            err.write(str(e.code) + "\n")
    except BaseException as e:
        code, etype = 1, type(e).__name__
        err.write("".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next)))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "exit_code": code, "error_type": etype}
'''


def run_report(r) -> RunReport:
    """A sandbox RunResult of RUNNER -> RunReport."""
    base = dict(duration_s=round(r.duration_s, 3), blocked=tuple(r.blocked))
    if r.status in ("timeout", "output_limit"):
        return RunReport(r.status, stdout=r.output_head, message=r.message, **base)
    if r.status != "ok":
        return RunReport("sandbox_error", stdout=r.output_head, error_type=r.error_type, message=r.message, **base)
    out = r.outputs[0] if r.outputs else None
    if not isinstance(out, dict):  # the program ended the process before returning
        err = (r.errors or [""])[0] or ""
        return RunReport("killed", stdout=r.output_head, message=err.split(": ", 1)[-1], **base)
    etype, code = out.get("error_type"), out.get("exit_code")
    status = "memory" if etype == "MemoryError" else "error" if etype else "exit" if code else "ok"
    return RunReport(status, str(out.get("stdout", "")), str(out.get("stderr", "")), code, etype, **base)


def run_program(verifier, code: str, timeout_s: float | None = None) -> RunReport:
    """Run `code` as a script in `verifier`'s sandbox, with its limits."""
    job = verifier._job("call", RUNNER, timeout_s, entry_point="__codechat_run__", inputs=[[code]])
    return run_report(verifier.pool.run(job))


def split_tests(text: str) -> tuple[list[str], str]:
    """Pasted test code -> (each top-level assert, the other statements as setup)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise CodechatError(f"/test: the pasted code does not parse (line {e.lineno}: {e.msg})") from None
    tests = [ast.get_source_segment(text, n) or "" for n in tree.body if isinstance(n, ast.Assert)]
    setup = [ast.get_source_segment(text, n) or "" for n in tree.body if not isinstance(n, ast.Assert)]
    if not tests:
        raise CodechatError("/test: no assert statements in the pasted code")
    return tests, "\n".join(setup)


def guess_entry_point(tests: list[str], answer: str) -> str | None:
    """The first function the tests call that the answer defines (else the first one they call)."""
    names: list[str] = []
    for t in tests:
        for n in ast.walk(ast.parse(t)):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in names:
                names.append(n.func.id)
    defined = [n for n in names if re.search(rf"^\s*(async\s+)?(def|class)\s+{re.escape(n)}\b", answer, re.M)]
    return (defined or names or [None])[0]


def check_asserts(verifier, question: str, answer: str, tests: list[str], setup: str = "",
                 entry_point: str | None = None) -> list[AssertResult]:
    """Each assert on its own against the code the verifier extracts from `answer` (as in training)."""
    pairs = [(Task(f"chat-test-{i}", question, [t], entry_point, setup), answer) for i, t in enumerate(tests)]
    return [AssertResult(t, v) for t, v in zip(tests, verifier.verify_many(pairs))]


def why(v: Verdict) -> str:
    """A failed verdict in a few words: status, exception type, message."""
    return ": ".join(x for x in (v.status, v.error_type, v.message) if x)
