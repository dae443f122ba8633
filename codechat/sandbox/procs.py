"""The zygote's children: a pre-forked candidate process (`Spare`), the long-lived judge (`JudgeProc`), and
`kill_program`, which ends a program and every process it created.

A `Spare` is forked while the zygote is idle, so a job does not wait for fork + setup: it already sits in its
own session, in a fresh temp dir, with stdout/stderr on a capped pipe and a socket to the judge. It waits for
one control message (limits + the payload pipe), then applies the limits, drops to the sandbox uid, reads the
program and runs it (`candidate.serve`). Everything before that message is our code: no program has run yet.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import resource
import signal
import socket
import struct
import sys

from codechat.sandbox import candidate, isolation, wire

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None)


def die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _child_fds(keep: list[int]) -> None:
    """Move `keep` to fds 3, 4, 5, ... in order and close everything else above 2."""
    tmp = [os.dup(fd) for fd in keep]
    for i, fd in enumerate(tmp):
        os.dup2(fd, 3 + i)
    os.closerange(3 + len(keep), 65536)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _fork(fn, *args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001 - a child must never return into the zygote's loop
            code = 70
        os._exit(code)
    return pid


class Spare:
    """A candidate process forked ahead of time, waiting for its job."""

    def __init__(self, uid: int | None):
        self.uid = uid
        self.tmp = f"/tmp/codechat-{os.getpid()}-{os.urandom(6).hex()}"  # (tempfile imports random: slow forks)
        os.mkdir(self.tmp, 0o700)
        if uid is not None:
            os.chown(self.tmp, uid, uid)
        sc, self.sj = socket.socketpair()  # candidate <-> judge
        self.ctl, cz = socket.socketpair()  # zygote -> candidate: one control message
        self.out_r, out_w = os.pipe()
        self.ev_r, ev_w = os.pipe()
        self.pid = _fork(_candidate_main, self.tmp, uid, sc.fileno(), cz.fileno(), out_w, ev_w)
        for fd in (out_w, ev_w):
            os.close(fd)
        sc.close()
        cz.close()

    def start(self, limits: isolation.Limits, cand_r: int) -> None:
        msg = pickle.dumps(limits)
        socket.send_fds(self.ctl, [struct.pack(">I", len(msg)) + msg], [cand_r])

    def close(self) -> None:
        for fd in (self.out_r, self.ev_r):
            os.close(fd)
        self.sj.close()
        self.ctl.close()
        isolation.rmtree(self.tmp)


def _candidate_main(tmp: str, uid: int | None, sc: int, cz: int, out_w: int, ev_w: int) -> None:
    os.setsid()
    die_with_parent()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    _child_fds([sc, cz, ev_w])
    os.chdir(tmp)
    # The zygote's own environment is already scrubbed (pool.py builds it from nothing); only point HOME and
    # TMPDIR here. sys.stdout/stderr are the zygote's objects, now writing to the capped pipe.
    os.environ["HOME"] = os.environ["TMPDIR"] = tmp
    ctl = socket.socket(fileno=4)
    head, fds, _, _ = socket.recv_fds(ctl, 4, 1)
    if not head or not fds:
        return  # the zygote is shutting down
    head += recv_exact(ctl, 4 - len(head))
    limits = pickle.loads(recv_exact(ctl, struct.unpack(">I", head)[0]))
    ctl.close()
    isolation.apply_limits(limits)
    isolation.drop_privileges(uid)
    die_with_parent()  # setuid cleared it
    candidate.serve(3, fds[0], 5)
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        pass


class JudgeProc:
    """The judge: a long-lived child that runs tests for one job at a time. It never runs program code, so it
    is reused across jobs; it is replaced after a timeout, an output overflow, or `max_jobs` jobs."""
    max_jobs = 500

    def __init__(self, memory_mb: int):
        self.sock, child = socket.socketpair()
        parent_sock = self.sock
        self.pid = _fork(lambda: (parent_sock.close(), _judge_server(child, memory_mb)))
        child.close()
        self.jobs = 0

    def submit(self, sj: int, judge_r: int, max_bytes: int) -> None:
        self.jobs += 1
        socket.send_fds(self.sock, [struct.pack(">I", max_bytes)], [sj, judge_r])

    def kill(self) -> None:
        _kill(self.pid)
        os.waitpid(self.pid, 0)
        self.sock.close()


def _judge_server(sock: socket.socket, memory_mb: int) -> None:
    from codechat.sandbox import modes  # here, not in the zygote: it pulls in ast, importlib, ...
    os.setpgid(0, 0)
    die_with_parent()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _child_fds([sock.fileno()])
    sock = socket.socket(fileno=3)
    # Address space only: the judge runs trusted tests, but decodes values the program chose.
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    os.environ.clear()
    while True:
        head, fds, _, _ = socket.recv_fds(sock, 4, 2)
        if not head:
            return
        head += recv_exact(sock, 4 - len(head))
        (max_bytes,) = struct.unpack(">I", head)
        try:
            rec = modes.judge(fds[0], fds[1], max_bytes)
        except BaseException as e:  # noqa: BLE001 - report, and stay up for the next job
            rec = wire.dumps({"status": "error", "error_type": "JudgeError",
                              "message": f"{type(e).__name__}: {e}"[:300]})
        for fd in fds:
            os.close(fd)
        sock.sendall(struct.pack(">I", len(rec)) + rec)


def _children(pid: int) -> list[int] | None:
    """Children of every thread of `pid` (needs /proc/PID/task/TID/children), or None if unknown."""
    try:
        kids: list[int] = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(p) for p in f.read().split()]
        return kids
    except OSError:
        return None


def stop_program(cpid: int, judge_pid: int) -> bool:
    """SIGKILL the program's group; True if it provably left no other process (the common, fast case).

    After the kill returns, the program cannot create processes any more (fork checks for a pending fatal
    signal). The zygote is a child subreaper, so any descendant is either a child of the program or re-parented
    to us: if neither list holds one, there is nothing else to kill."""
    try:
        os.killpg(cpid, signal.SIGKILL)
    except OSError:
        pass
    mine = _children(os.getpid())
    theirs = _children(cpid)
    return mine is not None and theirs == [] and set(mine) <= {cpid, judge_pid}


def reap_program(cpid: int, uid: int | None, judge_pid: int) -> int:
    """Wait for the program and kill every remaining descendant; returns the program's wait status."""
    _kill(cpid)
    status = os.waitpid(cpid, 0)[1]
    escaped = False
    for _ in range(1000):
        kids = _children(os.getpid())
        if kids is None:
            escaped = True
            break
        kids = [k for k in kids if k != judge_pid]
        if not kids:
            break
        escaped = True
        for k in kids:
            _kill(k)
        for k in kids:
            try:
                os.waitpid(k, 0)
            except ChildProcessError:
                pass
    if escaped:  # belt and braces: everything the sandbox uid still runs, anywhere
        isolation.reap_uid(uid, cpid)
        reap_orphans()
    return status


def reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
