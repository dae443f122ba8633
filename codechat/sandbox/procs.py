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
import _socket
import sys

from codechat.sandbox import candidate, isolation, wire

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None)
# Resolved here, once: the first attribute access on a CDLL builds a function object, and doing that in every
# forked child costs it dozens of copy-on-write page faults.
_prctl = _libc.prctl
_SIGKILL = int(signal.SIGKILL)
_LIMITS = struct.Struct("=7q")  # cpu_s, memory_mb, nproc, nofile, fsize_mb, max payload bytes, (reserved)
_FD = struct.Struct("=i")


def die_with_parent() -> None:
    _prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)


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


_devnull = -1
_SPARE_FDS = 4  # sc, cz, out_w, ev_w: the candidate's ends, created by the supervisor, forked with by the zygote
_REQ = struct.Struct("=cq")  # op, pid
_REPLY = struct.Struct("=q")


class Forker:
    """The supervisor's handle on the zygote, which does nothing but fork spares and wait for them.

    Requests (SOCK_SEQPACKET: one message each, fds attached): b"F" + tmp path with the spare's four fds ->
    reply: its pid; b"W" pid: wait for a program already killed and shown to have left nothing (no reply);
    b"R" pid: kill and reap the program and every process it left -> reply: its wait status."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def fork(self, tmp: str, fds: list[int]) -> None:
        self.sock.sendmsg([_REQ.pack(b"F", 0) + tmp.encode()],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"={len(fds)}i", *fds))])

    def wait(self, pid: int) -> None:
        self.sock.send(_REQ.pack(b"W", pid))

    def reap(self, pid: int) -> int:
        self.sock.send(_REQ.pack(b"R", pid))
        return self.reply()

    def reply(self) -> int:
        data = self.sock.recv(_REPLY.size)
        if len(data) != _REPLY.size:
            raise EOFError("the zygote is gone")
        return _REPLY.unpack(data)[0]


class Spare:
    """A candidate process forked ahead of time (by the zygote, on the supervisor's request), waiting for its job.
    Its pid is read from the zygote's reply when first needed."""

    def __init__(self, uid: int | None, forker: Forker):
        self.uid = uid
        self.forker = forker
        self.tmp = f"/tmp/codechat-{os.getpid()}-{os.urandom(6).hex()}"  # (tempfile imports random: slow forks)
        os.mkdir(self.tmp, 0o700)
        if uid is not None:
            os.chown(self.tmp, uid, uid)
        sc, self.sj = socket.socketpair()  # candidate <-> judge
        self.ctl, cz = socket.socketpair()  # supervisor -> candidate: one control message
        self.out_r, out_w = os.pipe()
        self.ev_r, ev_w = os.pipe()
        forker.fork(self.tmp, [sc.fileno(), cz.fileno(), out_w, ev_w])
        for fd in (out_w, ev_w):
            os.close(fd)
        sc.close()
        cz.close()
        self._pid: int | None = None
        self.collected = False

    @property
    def pid(self) -> int:
        if self._pid is None:
            self._pid = self.forker.reply()
        return self._pid

    def collect(self, clean: bool) -> int:
        """After `stop_program`: have the zygote wait for the program (`clean`: nothing else to do, no reply)
        or reap it and everything it left; returns its wait status (0 when clean)."""
        self.collected = True
        if clean:
            self.forker.wait(self.pid)
            return 0
        return self.forker.reap(self.pid)

    def start(self, limits: isolation.Limits, cand_r: int) -> None:
        msg = _LIMITS.pack(limits.cpu_s, limits.memory_mb, limits.nproc, limits.nofile, limits.fsize_mb, 0, 0)
        socket.send_fds(self.ctl, [msg], [cand_r])

    def close(self) -> None:
        for fd in (self.out_r, self.ev_r):
            os.close(fd)
        self.sj.close()
        self.ctl.close()
        isolation.rmtree(self.tmp)


def serve_forks(sock: socket.socket, uid: int | None, keep: int) -> None:
    """The zygote's loop: fork spares and wait for programs, as the supervisor (`keep`, never killed) asks.

    Deliberately small: every page this process writes while a spare is alive is copied (the spare shares it),
    so all the per-job work (select loop, output, /proc checks, temp dirs, replies) lives in the supervisor."""
    global _devnull
    _devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    environ = os.environ
    fork, waitpid, close, recvmsg, send = os.fork, os.waitpid, os.close, sock.recvmsg, sock.send
    space = socket.CMSG_SPACE(_SPARE_FDS * 4)
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
            tmp = msg[size:].decode()
            # the zygote's environment is scrubbed (pool.py builds it from nothing): only HOME and TMPDIR vary
            environ["HOME"] = environ["TMPDIR"] = tmp
            pid = fork()
            if pid == 0:
                code = 0
                try:
                    _candidate_main(tmp, uid, *fds)
                except BaseException:  # noqa: BLE001 - a child must never return into the zygote's loop
                    code = 70
                os._exit(code)
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
    isolation.apply_limits(isolation.Limits(*_LIMITS.unpack(msg)[:5]))
    isolation.drop_privileges(uid)
    _prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)  # setuid cleared it
    candidate.serve(3, payload_fd, 5)
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        pass


_CMSG_FD_SPACE = socket.CMSG_SPACE(_FD.size)


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
    from codechat.sandbox import modes  # not in the zygote (ast, importlib, ...); the supervisor has it already
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


def stop_program(cpid: int, zygote_pid: int, supervisor_pid: int) -> bool:
    """SIGKILL the program's group; True if it provably left no other process (the common, fast case).

    After the kill returns, the program cannot create processes any more (fork checks for a pending fatal
    signal). The zygote is a child subreaper, so any descendant is either a child of the program or re-parented
    to us: if neither list holds one, there is nothing else to kill."""
    try:
        os.killpg(cpid, signal.SIGKILL)
    except OSError:
        pass
    mine = _children(zygote_pid)
    theirs = _children(cpid)
    return mine is not None and theirs == [] and set(mine) <= {cpid, supervisor_pid}


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
