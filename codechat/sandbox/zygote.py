"""The zygote: a warm, pre-imported process that forks one program at a time; its supervisor runs the job.

Started by `pool.py` as `python -m codechat.sandbox.zygote FD` with a scrubbed environment, it enters its own
network and mount namespaces and the fresh root once (`isolation.enter_namespaces`, `rootfs.py`), prepares the
seccomp filter every program installs (`seccomp.py`), becomes a child subreaper, and forks its
supervisor (`supervisor.py`), which owns the socket to the parent and forks the judge. From then on the zygote only forks spares
and waits for programs, as the supervisor asks (`procs.serve_forks`): every page a process writes while a child
shares it is copied, so the process that forks must do as little as possible between forks.
  parent -> supervisor: a small control record (limits, timeout) plus two pipe fds, one holding the program's
      payload and one holding the judge's payload. Neither the supervisor nor the zygote reads either
      payload, so no later child can find earlier tests in memory it inherits (the zygote does not even see
      the records of earlier jobs).
  supervisor -> parent: what it observed (timeout, output over the cap, exit signal, protections hit) plus
      the judge's result record, still encoded.
Per job, a pre-forked candidate (`spare.Spare`: own session, fresh temp dir owned by the sandbox uid) gets its
limits and payload; the judge gets the tests; a wall-clock deadline runs; then the program and everything it
created is killed, the temp dir removed, and the next spare forked while the parent reads the result.
Forking from here costs well under a millisecond; exec-ing a fresh interpreter costs tens.
"""
from __future__ import annotations

import builtins
import ctypes
import gc
import json
import os
import _socket
import sys

from codechat.sandbox import cgroup, frames, isolation, procs, seccomp

# Imported once here so that forked programs do not pay for them (copy-on-write after fork).
# Only small, common ones: each extension module adds mappings, and fork time grows with them (random and
# tempfile pull in OpenSSL through hashlib and make every fork ~0.3 ms slower; a program importing them pays once).
import bisect, collections, copy as _copy, functools, heapq, itertools, math, operator, re, string, typing  # noqa: E401,F401,E501

PR_SET_CHILD_SUBREAPER = 36


class _Quitter:
    """`exit()` / `quit()` as `site` defines them (programs run under `python -S`, which skips `site`): raise
    SystemExit, the ending of many competitive programs (`print(ans); exit()`). Nothing else of `site` is added."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code=None):
        raise SystemExit(code)


def _add_site_builtins() -> None:
    for name in ("exit", "quit"):
        if not hasattr(builtins, name):
            setattr(builtins, name, _Quitter(name))


def serve(sock: _socket.socket) -> None:
    _add_site_builtins()
    hello = json.loads(frames.recv(sock.fileno()))
    mem = None
    if hello.get("cgroup"):  # (before the fresh root: /sys is not there)
        try:
            mem = cgroup.Memory(hello["cgroup"])
            mem.join()
        except OSError as e:
            print(f"codechat sandbox: no memory cgroup: {e}", file=sys.stderr)
            mem = None
    active = isolation.enter_namespaces(tuple(hello.get("hide_paths", ())))
    if mem is not None:
        active.append("memory_cgroup")
        try:  # never the OOM killer's choice, where lowering the score is allowed (programs are at 1000)
            cgroup.set_oom_score("self", -1000)
        except OSError:
            pass
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    uid = isolation.sandbox_uid()
    if uid is not None:
        active += ["own_uid", "judge_unprivileged"]  # (the supervisor's judge drops to its own uid: JudgeProc)
    if seccomp.prepare():
        procs._SECCOMP = True
        active.append("seccomp")
    judge_mb = int(hello.get("judge_memory_mb", 4096))  # address space of the judge, which decodes values
    tmp = procs.spare_dir()
    zsock, ssock = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    sup = procs._fork(_supervisor_main, zsock, sock, ssock, uid, judge_mb, active, tmp, mem)
    sock.close()
    ssock.close()
    del hello
    gc.collect()
    gc.freeze()  # keep imported objects out of the children's GC passes: fewer copy-on-write page faults
    ctypes.CDLL(None).malloc_trim(0)  # hand free heap back to the OS: fewer page-table entries to copy per fork
    try:
        procs.serve_forks(zsock, uid, sup, tmp)
    except (OSError, EOFError):
        pass
    # the supervisor is gone (the parent closed the connection, or it failed): leave nothing behind
    procs.reap_program(sup, uid, 0)


def _supervisor_main(zsock, sock, ssock, uid, judge_mb, active, tmp, mem) -> None:
    zsock.close()
    if mem is not None:  # out of the programs' cgroup, and back to a normal OOM score (the judge inherits both)
        mem.leave()  # (raises if it cannot: the pool then reports the zygote broken, nothing runs unlimited)
        try:
            cgroup.set_oom_score("self", 0)
        except OSError:
            pass
    from codechat.sandbox import supervisor  # imported after the fork: the zygote never loads it
    supervisor.supervise(sock, ssock, uid, judge_mb, active, tmp, mem)


if __name__ == "__main__":
    import signal  # after the fork: the zygote keeps its imports minimal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop (Ctrl-C goes to it)
    serve(_socket.socket(fileno=int(sys.argv[1])))
