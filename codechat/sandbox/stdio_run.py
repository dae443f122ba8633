"""The candidate side of a stdin/stdout job: run the program as `__main__` on one test's input.

Runs in the sandboxed candidate process (limits applied, privileges dropped) in place of the RPC server, when
the payload carries `stdin`. Layout, per test (one fresh process per test, so a program sees only its own
input and keeps no state between tests):
- the input goes into a memfd that becomes fd 0 (`input()`, `sys.stdin`, `open(0)` and `os.read(0)` all work);
- a pipe becomes the program's fd 1; its read end is handed to the judge over the judge socket (SCM_RIGHTS),
  so stdout bytes go straight to the judge and never through this process; stderr stays on the capped pipe
  the supervisor reads;
- the program runs in a forked child (a fresh `__main__` module, the audit hook installed, no judge socket);
  this parent waits for it with `wait4` and sends the judge one trailer: exit kind, code, CPU and wall time,
  measured by the kernel, not reported by the program. The parent is made non-dumpable so the program (same
  uid) cannot ptrace it or read its memory.

Protects against (beyond the sandbox's own list): reading the expected output or other tests' inputs (they
are never in this process), forging the exit report (the program has no handle on the judge socket), faking a
pass by exiting early (output is judged, and a nonzero exit or uncaught exception fails).
Does not protect against: CPU time spent in processes the program forks and never waits for is not in
`cpu_s` (the wall-clock backstop and RLIMIT_CPU per process still apply; forking is reported as `subprocess`
in `blocked`); a grandchild that keeps stdout open holds the test until its time limit (`timeout`).

Imported by the zygote (via candidate.py): keep the imports small and C-level.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import _socket
import struct
import sys
import time
import types

TRAILER = struct.Struct(">bidd")
"""(kind, value, cpu_s, wall_s): kind 0 = exit code `value`, 1 = killed by signal `value`,
2 = uncaught exception (`value` 1 when it was a MemoryError)."""
EXIT, SIGNAL, RAISED = 0, 1, 2
# the child's exit codes after an uncaught exception (its type and message are on stderr)
_RAISED_CODE, _MEMORY_CODE = 113, 114
PR_SET_DUMPABLE = 4


def _stdin_fd(data: bytes) -> int:
    fd = os.memfd_create("stdin", 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _shutdown() -> None:
    """What interpreter exit does before the streams close: wait for non-daemon threads (the deep-recursion
    `threading.Thread(target=main)` idiom), then run atexit handlers."""
    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - the program's own threads/handlers: a failure there is its output
        pass


def _run_main(code: str, install_hook) -> None:
    """In the child: exec `code` as `__main__`; never returns (exit code 0, the program's, or _RAISED_CODE)."""
    mod = types.ModuleType("__main__")
    mod.__dict__["__builtins__"] = __builtins__
    mod.__dict__["__file__"] = "main.py"
    sys.modules["__main__"] = mod
    sys.argv = ["main.py"]
    install_hook()
    status = 0
    try:
        exec(compile(code, "main.py", "exec", dont_inherit=True), mod.__dict__)
    except SystemExit as e:
        c = e.code
        status = 0 if c is None else c if isinstance(c, int) else 1
        if not isinstance(c, (int, type(None))):
            try:
                sys.stderr.write(f"{c}\n")
            except BaseException:  # noqa: BLE001
                pass
    except BaseException as e:  # noqa: BLE001 - the program's uncaught exception: a runtime error
        status = _MEMORY_CODE if isinstance(e, MemoryError) else _RAISED_CODE
        try:
            sys.stderr.write(f"{type(e).__name__}: {e}\n")
        except BaseException:  # noqa: BLE001
            pass
    _shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken stdout: what was written is what counts
            pass
    os._exit(status & 0xFF)


def serve(sock_fd: int, payload: dict, install_hook) -> None:
    """Run one stdin/stdout test; returns after the judge has the trailer."""
    try:
        compile(payload["code"], "main.py", "exec", dont_inherit=True)
    except BaseException as e:  # noqa: BLE001 - report like the RPC path does: no program run
        kind = "SyntaxError" if isinstance(e, SyntaxError) else type(e).__name__
        os.write(sock_fd, b"E" + f"{kind}: {e}"[:300].encode(errors="replace"))
        return
    try:  # the caller's extra files (serve's `files`), as the program's own uid, under its limits
        for name, data in payload.get("files", {}).items():
            if os.path.dirname(name):
                os.makedirs(os.path.dirname(name), exist_ok=True)
            with open(name, "xb") as f:
                f.write(data)
    except OSError as e:
        why = f"OSError: cannot write file {name!r}: {e.strerror}"[:300]
        os.write(sock_fd, b"E" + why.encode(errors="replace"))
        return
    in_fd = _stdin_fd(payload["stdin"])
    os.dup2(in_fd, 0)
    os.close(in_fd)
    out_r, out_w = os.pipe()
    sock = _socket.socket(fileno=os.dup(sock_fd))
    sock.sendmsg([b"O"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("=i", out_r))])
    os.close(out_r)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        sock.close()
        os.close(sock_fd)
        os.dup2(out_w, 1)
        os.close(out_w)
        _run_main(payload["code"], install_hook)
    os.close(out_w)
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # (ctypes: already loaded in the zygote)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(status):
        kind, value = SIGNAL, os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
        kind, value = ((RAISED, code == _MEMORY_CODE) if code in (_RAISED_CODE, _MEMORY_CODE) else (EXIT, code))
    sock.sendall(b"T" + TRAILER.pack(kind, value, cpu, wall))
    sock.close()
