"""The judge side of a stdin/stdout job: read the program's stdout, compare it with the expected output.

The judge process (which never runs program code) receives, over the judge socket, the read end of the
program's stdout pipe (`stdio_run.serve`), reads it to the end under a byte cap, then reads the trailer the
candidate's parent sent after `wait4` (exit status, CPU and wall time). The expected output and the checker
live only here: the program's process never sees them.

Comparison (`outputs_match`): line by line after trimming trailing whitespace, trailing blank lines ignored;
lines that differ are compared token by token, the spaces between tokens exactly: words and integers exactly, a decimal token against an integer
by exact value, two decimal tokens within the task's `float_tol` or, when it sets none, 1e-6 (absolute or
relative), as the APPS and TACO harnesses do. A task's `checker` (Python source defining `check(input, output, expected) -> bool`, trusted:
written by the task's author, like a special judge) replaces the comparison.

Grammar of the socket stream (untrusted: the program may write anything, or nothing):
    b"E" utf-8 text                       the code did not compile (nothing ran)
    b"O" + fd (SCM_RIGHTS), then b"T" + stdio_run.TRAILER (22 bytes in all)
Anything else is an `EarlyExit` error.
"""
from __future__ import annotations

import array
import math
import os
import re
import signal
import socket
from decimal import Decimal, InvalidOperation

from codechat.sandbox.stdio_run import EXIT, RAISED, SIGNAL, TRAILER

_CHECKERS: dict[str, object] = {}


def _lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


_SPACES = re.compile(r"(\s+)")
_INT = re.compile(r"[+-]?\d+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(?=[eE]))([eE][+-]?\d+)?", re.ASCII)
DEFAULT_FLOAT_TOL = 1e-6
"""Decimal tokens agree within this (absolute or relative) when the task sets no `float_tol`: the rule of the
harnesses APPS and TACO ship, for the many problems whose statements accept answers within 1e-6."""
_MAX_NUMBER_CHARS = 400  # longer numeric tokens are compared as text: no float or Decimal work on model text


def _token_match(a: str, b: str, tol: float) -> bool:
    """One output token against the expected one. Words and integers stay exact; a decimal token against an
    integer must have the integer's exact value (`5.0` for `5`, never `1000000000.0` for `1000000007`); two decimal
    tokens agree within `tol`."""
    if a == b:
        return True
    if len(a) > _MAX_NUMBER_CHARS or len(b) > _MAX_NUMBER_CHARS:
        return False
    a_int, b_int = _INT.fullmatch(a) is not None, _INT.fullmatch(b) is not None
    a_dec, b_dec = not a_int and _DECIMAL.fullmatch(a) is not None, not b_int and _DECIMAL.fullmatch(b) is not None
    if not (a_int or a_dec) or not (b_int or b_dec):
        return False  # a word: exact only
    if a_int and b_int:
        return False  # two different integer texts (`7` vs `07` is a different output)
    try:
        x, y = Decimal(a), Decimal(b)
    except InvalidOperation:
        return False
    if a_int or b_int:
        return x == y
    x, y = float(x), float(y)
    return math.isfinite(x) and math.isfinite(y) and math.isclose(x, y, rel_tol=tol, abs_tol=tol)


def outputs_match(output: str, expected: str, float_tol: float = 0.0, ignore_case: bool = False) -> bool:
    """The default rule: equal lines after trimming trailing whitespace; else token by token, decimal tokens
    within `float_tol` (the default `DEFAULT_FLOAT_TOL` when the task sets none), integers and words exact
    (`ignore_case`: words compared case-insensitively)."""
    if ignore_case:
        output, expected = output.lower(), expected.lower()
    got, want = _lines(output), _lines(expected)
    if got == want:
        return True
    if len(got) != len(want):
        return False
    tol = float_tol if float_tol > 0 else DEFAULT_FLOAT_TOL
    for g, w in zip(got, want):
        gt, wt = _SPACES.split(g), _SPACES.split(w)  # tokens at even places, the spaces between them at odd
        if len(gt) != len(wt) or any(a != b if i % 2 else not _token_match(a, b, tol)
                                     for i, (a, b) in enumerate(zip(gt, wt))):
            return False
    return True


def _checker(src: str):
    fn = _CHECKERS.get(src)
    if fn is None:
        ns: dict = {}
        exec(compile(src, "<checker>", "exec", dont_inherit=True), ns)
        fn = ns.get("check")
        if not callable(fn):
            raise TypeError("the checker defines no function check(input, output, expected)")
        if len(_CHECKERS) > 1000:
            _CHECKERS.clear()
        _CHECKERS[src] = fn
    return fn


def _read_capped(fd: int, cap: int) -> tuple[bytes, bool]:
    chunks, total = [], 0
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), False
        total += len(chunk)
        if total > cap:
            return b"", True
        chunks.append(chunk)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def _result(status: str, etype: str | None = None, message: str = "", cpu: float = 0.0, wall: float = 0.0
            ) -> dict:
    return {"status": status, "error_type": etype, "message": message, "tests_passed": int(status == "passed"),
            "outputs": [float(cpu), float(wall)]}


def verdict_of(out: bytes, trailer: bytes, job: dict) -> dict:
    """The result record for one test from the program's stdout and its trailer (both untrusted bytes)."""
    spec = job.get("stdio") or {}
    if len(trailer) != 1 + TRAILER.size or trailer[:1] != b"T":
        return _result("error", "EarlyExit", "the program's runner ended before reporting its exit")
    kind, value, cpu, wall = TRAILER.unpack(trailer[1:])
    cpu_limit = float(spec.get("cpu_limit_s") or 0)
    if kind == SIGNAL:
        if value == signal.SIGXCPU:
            return _result("timeout", None, "CPU time limit reached", cpu, wall)
        name = signal.Signals(value).name if value in signal.Signals._value2member_map_ else str(value)
        return _result("error", "Killed", f"killed by {name}", cpu, wall)
    if cpu_limit and cpu > cpu_limit:
        return _result("timeout", None, f"CPU time {cpu:.2f}s over the {cpu_limit:g}s limit", cpu, wall)
    if kind == RAISED:
        if value:
            return _result("memory", "MemoryError", "the program ran out of memory", cpu, wall)
        return _result("error", "RuntimeError", "the program raised an uncaught exception", cpu, wall)
    if kind != EXIT:
        return _result("error", "EarlyExit", "malformed exit report", cpu, wall)
    if value != 0:
        return _result("error", "NonZeroExit", f"the program exited with status {value}", cpu, wall)
    text = out.decode("utf-8", errors="replace")
    expected = str(job["expected"][0])
    if spec.get("checker"):
        try:
            ok = bool(_checker(spec["checker"])(str(spec.get("input", "")), text, expected))
        except BaseException as e:  # noqa: BLE001 - the checker is the task's: its failure is not the program's
            return _result("error", "CheckerError", f"checker: {type(e).__name__}: {e}"[:300], cpu, wall)
    else:
        ok = outputs_match(text, expected, float(spec.get("float_tol") or 0), spec.get("ignore_case") is True)
    if ok:
        return _result("passed", None, "", cpu, wall)
    return _result("failed", "WrongAnswer", "wrong output", cpu, wall)


def judge(sock_fd: int, job: dict, max_bytes: int) -> dict:
    """One stdin/stdout test in the judge; `max_bytes` caps the stdout kept (over it: `output_limit`)."""
    sock = socket.socket(fileno=os.dup(sock_fd))
    try:
        fds = array.array("i")
        try:
            msg, anc, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(fds.itemsize))
        except OSError as e:
            return _result("error", "EarlyExit", f"program ended while loading ({e})")
        for level, typ, data in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        if msg == b"E" and not fds:
            text = _recv_exact(sock, 400).decode("utf-8", errors="replace")
            etype = text.split(":", 1)[0][:100]
            status = "syntax_error" if etype in ("SyntaxError", "IndentationError", "TabError") else "error"
            return _result(status, etype, text[:300])
        if msg != b"O" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return _result("error", "EarlyExit", "program ended while loading (malformed start)")
        try:
            out, over = _read_capped(fds[0], max_bytes)
        finally:
            os.close(fds[0])
        if over:
            return _result("output_limit", None, f"stdout exceeded {max_bytes} bytes")
        return verdict_of(out, _recv_exact(sock, 1 + TRAILER.size), job)
    finally:
        sock.close()
