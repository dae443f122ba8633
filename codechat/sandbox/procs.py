"""Processes of the sandbox at the lowest level: the zygote's fork loop (`serve_forks`), the start of a
candidate (`_candidate_main`), and reaping (`reap_program`). Kept small in imports and in work: this module
runs in the zygote, and everything the zygote has imported or touches makes each fork dearer.

A spare candidate is forked while the supervisor is busy elsewhere, so a job does not wait for fork + setup: it
already sits in its own session, in a fresh temp dir, with stdout/stderr on a capped pipe and a socket to the
judge. It waits for one control message (limits + the payload pipe), then applies the limits, drops to the
sandbox uid, reads the program and runs it (`candidate.serve`). Everything before that message is our code: no
program has run yet.
"""
from __future__ import annotations

import ctypes
import os
import signal
import struct
import _socket
import sys

from codechat.sandbox import candidate, isolation, seccomp

PR_SET_PDEATHSIG = 1
CLONE_NEWPID = isolation.CLONE_NEWPID
_SECCOMP = False  # set by the zygote when the filter is prepared (`seccomp.prepare`)
_libc = ctypes.CDLL(None)
# Resolved here, once: the first attribute access on a CDLL builds a function object, and doing that in every
# forked child costs it dozens of copy-on-write page faults.
_prctl = _libc.prctl
_unshare, _setns = _libc.unshare, _libc.setns
_SIGKILL = int(signal.SIGKILL)
_LIMITS = struct.Struct(f"={3 * isolation.N_RLIMITS}q")  # isolation.rlimits(): (resource, soft, hard) * 6
_FD = struct.Struct("=i")


def die_with_parent() -> None:
    _prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)


def _child_fds(keep: list[int]) -> None:
    """Move `keep` to fds 3, 4, 5, ... in order and close everything else above 2."""
    tmp = [os.dup(fd) for fd in keep]
    for i, fd in enumerate(tmp):
        os.dup2(fd, 3 + i)
    os.closerange(3 + len(keep), 65536)


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


_devnull = -1
_SPARE_FDS = 4  # sc, cz, out_w, ev_w: the candidate's ends, created by the supervisor, forked with by the zygote
_REQ = struct.Struct("=cq")  # op, pid
_REPLY = struct.Struct("=q")


def spare_dir() -> str:
    """The temp dir (cwd, HOME, TMPDIR) of this zygote's programs: one path, made afresh for each program.
    Fixed per zygote, so that the zygote sets HOME and TMPDIR once: glibc's setenv keeps every distinct value
    it was ever given, so a new path per program would grow the zygote (and every fork) without end."""
    return f"/tmp/codechat-{os.getpid()}-{os.urandom(6).hex()}"  # (tempfile imports random: slow forks)


def serve_forks(sock: _socket.socket, uid: int | None, keep: int, tmp: str) -> None:
    """The zygote's loop: fork spares and wait for programs, as the supervisor (`keep`, never killed) asks.

    Deliberately small: every page this process writes while a spare is alive is copied (the spare shares it),
    so all the per-job work (select loop, output, /proc checks, temp dirs, replies) lives in the supervisor."""
    global _devnull
    _devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    ns, own_ns = isolation.PROGRAM_NS, isolation.OWN_PIDNS_FD
    # the zygote's environment is scrubbed (pool.py builds it from nothing): only HOME and TMPDIR are added
    os.environ["HOME"] = os.environ["TMPDIR"] = tmp
    fork, waitpid, close, recvmsg, send = os.fork, os.waitpid, os.close, sock.recvmsg, sock.send
    space = _socket.CMSG_SPACE(_SPARE_FDS * 4)
    fds_fmt = f"={_SPARE_FDS}i"
    pack, unpack_from, size = _REPLY.pack, _REQ.unpack_from, _REQ.size
    while True:
        msg, anc, _, _ = recvmsg(4096, space)
        if len(msg) < size:
            return
        op, pid = unpack_from(msg)
        if op == b"F":
            fds = struct.unpack(fds_fmt, anc[0][2]) if anc and len(anc[0][2]) == _SPARE_FDS * 4 else ()
            if len(fds) != _SPARE_FDS:
                return
            if ns:  # the program is process 1 of a new PID namespace (and alone in a new IPC namespace)
                if _unshare(ns) != 0:
                    return  # a program without its namespaces must not run: the supervisor sees us go
            pid = fork()
            if pid == 0:
                code = 0
                try:
                    _candidate_main(tmp, uid, *fds)
                except BaseException:  # noqa: BLE001 - a child must never return into the zygote's loop
                    code = 70
                os._exit(code)
            if ns and _setns(own_ns, CLONE_NEWPID) != 0:  # back home for every other fork (reaper, next spare)
                return
            for fd in fds:
                close(fd)
            send(pack(pid))
        elif op == b"W":
            try:
                waitpid(pid, 0)
            except ChildProcessError:
                pass
        elif op == b"R":
            status = reap_program(pid, uid, keep) if pid > 0 else 0
            send(pack(status))
        else:
            return


def _candidate_main(tmp: str, uid: int | None, sc: int, cz: int, out_w: int, ev_w: int) -> None:
    # Kept flat and C-level on purpose: this runs in every child, where each Python-level function or object
    # touched for the first time copies a page of the zygote.
    os.setsid()
    _prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    os.dup2(_devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    _child_fds([sc, cz, ev_w])
    os.chdir(tmp)
    # sys.stdout/stderr are the zygote's objects, now writing to the capped pipe.
    # One control message: the limits and the payload pipe (read with recvmsg: no socket.py wrappers).
    ctl = _socket.socket(fileno=4)
    msg, anc, _, _ = ctl.recvmsg(_LIMITS.size, _CMSG_FD_SPACE)
    if len(msg) != _LIMITS.size or not anc or len(anc[0][2]) < _FD.size:
        return  # the zygote is shutting down
    payload_fd = _FD.unpack_from(anc[0][2])[0]
    ctl.close()
    isolation.apply_rlimits(_LIMITS.unpack(msg))
    isolation.drop_privileges(uid)
    _prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)  # setuid cleared it
    if _SECCOMP and not seccomp.install(_prctl):
        return  # never run a program without the filter the zygote reported as active
    candidate.serve(3, payload_fd, 5)
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        pass


_CMSG_FD_SPACE = _socket.CMSG_SPACE(_FD.size)


def _children(pid: int, single_threaded: bool = False) -> list[int] | None:
    """Children of every thread of `pid` (needs /proc/PID/task/TID/children), or None if unknown.
    `single_threaded`: `pid` is one of ours that never starts a thread (the zygote): skip listing its threads."""
    try:
        kids: list[int] = []
        for tid in [pid] if single_threaded else os.listdir(f"/proc/{pid}/task"):
            fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY)  # (no io stack: this runs per job)
            try:
                data = b""
                while chunk := os.read(fd, 65536):
                    data += chunk
            finally:
                os.close(fd)
            kids += [int(p) for p in data.split()]
        return kids
    except OSError:
        return None


def reap_program(cpid: int, uid: int | None, keep: int) -> int:
    """In the zygote: wait for the program and kill every remaining descendant (all our children but `keep`,
    the supervisor); returns the program's wait status."""
    _kill(cpid)
    status = os.waitpid(cpid, 0)[1]
    escaped = False
    for _ in range(1000):
        kids = _children(os.getpid())
        if kids is None:
            escaped = True
            break
        kids = [k for k in kids if k != keep]
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
