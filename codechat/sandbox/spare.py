"""Spares: the candidate processes the zygote forks ahead of time, on the supervisor's request, and how the
supervisor stops and collects each program (see zygote.py for the layout).

`Forker` is the supervisor's handle on the zygote; `Spare` one forked candidate with its temp dir, sockets and
pipes; `stop_program` kills a finished program and says whether it provably left nothing behind. Imported by the
supervisor only, after the fork, so the zygote stays small.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import _socket
import struct

from codechat.sandbox import isolation, procs, rootfs
from codechat.sandbox.procs import _LIMITS, _REPLY, _REQ


class Forker:
    """The supervisor's handle on the zygote, which does nothing but fork spares and wait for them.

    Requests (SOCK_SEQPACKET: one message each, fds attached): b"F" with the spare's four fds (its temp dir, at
    the zygote's fixed path, made ready) -> reply: its pid; b"W" pid: wait for a program already killed and
    shown to have left nothing (no reply); b"R" pid: kill and reap the program and every process it left ->
    reply: its wait status."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def fork(self, fds: list[int]) -> None:
        self.sock.sendmsg([_REQ.pack(b"F", 0)],
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

    def __init__(self, uid: int | None, forker: Forker, tmp: str, tmpfs: list[str] | None = None,
                 pid_ns: bool = False, drop=None):
        self.uid = uid
        self.forker = forker
        self.tmp = tmp  # the same path for every program of this zygote, removed after each (see spare_dir)
        self.tmpfs = tmpfs is not None  # /tmp is a new tmpfs for each program (fresh root): `tmpfs` carried over
        if tmpfs is not None:
            rootfs.fresh_tmp(tmp, uid, tmpfs, drop=drop)
        else:
            try:
                os.mkdir(tmp, 0o700)
            except FileExistsError:  # left by the previous program (a link planted there, ...): remove, no follow
                isolation.rmtree(tmp)
                os.mkdir(tmp, 0o700)
            if uid is not None:
                os.chown(self.tmp, uid, uid)
        # (bare _socket pairs: socket.socketpair re-wraps each end, one getsockname per end)
        sc, self.sj = _socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # candidate <-> judge
        self.ctl, cz = _socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # supervisor -> candidate
        self.out_r, out_w = os.pipe()
        self.ev_r, ev_w = os.pipe()
        forker.fork([sc.fileno(), cz.fileno(), out_w, ev_w])
        for fd in (out_w, ev_w):
            os.close(fd)
        sc.close()
        cz.close()
        self._pid: int | None = None
        self.collected = False
        self.pid_ns = pid_ns  # the program is process 1 of its own PID namespace (see stop_program)
        self.pidfd = -1

    @property
    def pid(self) -> int:
        if self._pid is None:
            self._pid = self.forker.reply()
            if self.pid_ns:  # (the pid cannot be reused before the zygote reaps it, which it does on our word)
                self.pidfd = os.pidfd_open(self._pid)
        return self._pid

    def collect(self, clean: bool) -> int:
        """After `stop_program`: have the zygote wait for the program (`clean`: nothing else to do) or reap it
        and everything it left; returns its wait status (0 when clean). Returns once all of it is gone: the
        program's pidfd turns readable when it has exited, which for process 1 of a PID namespace is after
        the kernel has killed and released every other process in it."""
        self.collected = True
        if clean:
            self.forker.wait(self.pid)
            if self.pidfd >= 0:
                select.select([self.pidfd], [], [])
            return 0
        return self.forker.reap(self.pid)

    def start(self, limits: isolation.Limits, cand_r: int) -> None:
        msg = _LIMITS.pack(*isolation.rlimits(limits))
        socket.send_fds(self.ctl, [msg], [cand_r])

    def close(self) -> None:
        for fd in (self.out_r, self.ev_r) + ((self.pidfd,) if self.pidfd >= 0 else ()):
            os.close(fd)
        self.sj.close()
        self.ctl.close()
        if not self.tmpfs:  # (with a fresh root the next Spare drops the whole /tmp: one umount, no walk)
            isolation.rmtree(self.tmp)


def stop_program(cpid: int, zygote_pid: int, supervisor_pid: int, pid_ns: bool = False) -> bool:
    """SIGKILL the program's group; True if it provably left no other process (the common, fast case).

    `pid_ns`: the program is process 1 of its own PID namespace, so its death kills every process in it, and
    the zygote's wait for it returns only once they are all gone: always True. Otherwise: after the kill
    returns, the program cannot create processes any more (fork checks for a pending fatal signal). The zygote
    is a child subreaper, so any descendant is either a child of the program or re-parented to us: if neither
    list holds one, there is nothing else to kill."""
    try:
        os.killpg(cpid, signal.SIGKILL)
    except OSError:
        pass
    if pid_ns:
        return True
    mine = procs._children(zygote_pid, single_threaded=True)
    theirs = procs._children(cpid)
    return mine is not None and theirs == [] and set(mine) <= {cpid, supervisor_pid}
