"""The judge side of a capture job: run a program on stdin and return what it printed, judging nothing.

Same transport as a stdin/stdout test (stdio_run.py runs the program, the judge receives its stdout pipe and
the kernel-measured exit trailer; see stdio_judge.py for the socket grammar), but instead of comparing the
output with an expected one the judge returns it with the exit report, for callers that do their own judging
(`codechat serve`'s SandboxFusion-compatible `/run_code`). A job asks for this with `stdio={"capture": True}`.

Result record (status `ok`, or the stdio statuses for what prevented a run):
    outputs = [stdout text, exit kind, exit value, cpu_s, wall_s]   (kinds: stdio_run.EXIT / SIGNAL / RAISED)
The program's stderr is not here: it reaches the parent on the supervisor's capped pipe (`output_head`).
"""
from __future__ import annotations

import array
import os
import socket

from codechat.sandbox.stdio_judge import _read_capped, _recv_exact, _result
from codechat.sandbox.stdio_run import TRAILER


def judge(sock_fd: int, max_bytes: int) -> dict:
    """The program's stdout and exit report; `max_bytes` caps the stdout kept (over it: `output_limit`)."""
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
        if msg == b"E" and not fds:  # did not compile: the message is what Python would print
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
        trailer = _recv_exact(sock, 1 + TRAILER.size)
        if len(trailer) != 1 + TRAILER.size or trailer[:1] != b"T":
            return _result("error", "EarlyExit", "the program's runner ended before reporting its exit")
        kind, value, cpu, wall = TRAILER.unpack(trailer[1:])
        return {"status": "ok", "error_type": None, "message": "", "tests_passed": 0,
                "outputs": [out.decode("utf-8", errors="replace"), int(kind), int(value), float(cpu), float(wall)]}
    finally:
        sock.close()
