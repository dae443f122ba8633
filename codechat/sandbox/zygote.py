"""The zygote: a warm, pre-imported process that forks one candidate + one judge per job and cleans up after.

Started by `pool.py` as `python -m codechat.sandbox.zygote FD` with a scrubbed environment, it enters its own
network and mount namespaces once (`isolation.enter_namespaces`), then serves jobs on a unix socket:
  parent -> zygote: a small control record (limits, timeout) plus two pipe fds, one holding the program's
      payload and one holding the judge's payload. The zygote never reads either payload, so no later child
      can find earlier tests in inherited memory.
  zygote -> parent: what it observed (timeout, output over the cap, exit signal, protections hit) plus the
      judge's result record, still encoded.
Per job: a fresh temp dir (owned by the sandbox uid, removed afterwards); the candidate in its own session,
with rlimits and the sandbox uid, stdout+stderr to a capped pipe; the judge as a separate child; a wall-clock
deadline; then everything the uid runs is killed and the zygote reaps orphans (it is a child subreaper).
Forking from here costs about a millisecond; exec-ing a fresh interpreter costs tens.
"""
from __future__ import annotations

import ctypes
import gc
import os
import pickle
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time

from codechat.sandbox import candidate, isolation, modes, wire

# Imported once here so that forked programs do not pay for them (copy-on-write after fork).
import bisect, collections, copy as _copy, datetime, decimal, fractions, functools, heapq, itertools, json, math  # noqa: E401,F401,E501
import operator, random, re, statistics, string, typing, dataclasses, enum, array, cmath  # noqa: E401,F401

PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG = 36, 1


_libc = ctypes.CDLL(None)


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _child_fds(keep: list[int]) -> None:
    """Move `keep` to fds 3, 4, 5, ... in order and close everything else above 2."""
    tmp = [os.dup(fd) for fd in keep]
    for i, fd in enumerate(tmp):
        os.dup2(fd, 3 + i)
    os.closerange(3 + len(keep), 65536)


def _candidate_child(job: dict, tmp: str, uid: int | None, sc: int, cand_r: int, out_w: int, ev_w: int) -> None:
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    _child_fds([sc, cand_r, ev_w])
    os.chdir(tmp)
    isolation.apply_limits(job["limits"])
    isolation.drop_privileges(uid)
    _die_with_parent()  # after setuid, which clears it
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8"})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # line-buffered: floods hit the output cap early
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    candidate.serve(3, 4, 5)
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
        self.pid = os.fork()
        if self.pid == 0:
            code = 0
            try:
                self.sock.close()
                _judge_server(child, memory_mb)
            except BaseException:  # noqa: BLE001
                code = 70
            os._exit(code)
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
    os.setpgid(0, 0)
    _die_with_parent()
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
        head += _recv_exact(sock, 4 - len(head))
        (max_bytes,) = struct.unpack(">I", head)
        try:
            rec = modes.judge(fds[0], fds[1], max_bytes)
        except BaseException as e:  # noqa: BLE001 - report, and stay up for the next job
            rec = wire.dumps({"status": "error", "error_type": "JudgeError", "message": f"{type(e).__name__}: {e}"[:300]})
        for fd in fds:
            os.close(fd)
        sock.sendall(struct.pack(">I", len(rec)) + rec)


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


def _children() -> list[int] | None:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return None


def kill_program(cpid: int, uid: int | None, judge_pid: int) -> int:
    """Kill the program and every descendant; returns the program's wait status.

    The zygote is a child subreaper, so descendants orphaned by a dying parent (double fork + setsid) are
    re-parented here and show up as our children: kill those until none is left. When any escaped, also
    kill everything the sandbox uid still runs anywhere (isolation.reap_uid)."""
    try:
        os.killpg(cpid, signal.SIGKILL)
    except OSError:
        pass
    status = os.waitpid(cpid, 0)[1]
    escaped = False
    for _ in range(1000):
        kids = _children()
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
    if escaped:
        isolation.reap_uid(uid, cpid)
        _reap_orphans()
    return status


def run_job(job: dict, cand_r: int, judge_r: int, uid: int | None, judge: JudgeProc) -> tuple[dict, bool]:
    """Run one job; returns (record for the parent, whether the judge must be replaced)."""
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="codechat-")
    if uid is not None:
        os.chown(tmp, uid, uid)
    sc, sj = socket.socketpair()
    out_r, out_w = os.pipe()
    ev_r, ev_w = os.pipe()
    cpid = _fork(_candidate_child, job, tmp, uid, sc.fileno(), cand_r, out_w, ev_w)
    judge.submit(sj.fileno(), judge_r, job["max_result_bytes"])
    for fd in (out_w, ev_w, cand_r, judge_r):
        os.close(fd)
    sc.close()
    sj.close()
    deadline = t0 + job["timeout_s"]
    out_head, out_total, events, res = b"", 0, b"", b""
    timed_out = over = res_done = False
    jfd = judge.sock.fileno()
    watch = [out_r, jfd, ev_r]
    while not res_done:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(watch, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if fd == out_r:
                out_total += len(chunk)
                out_head = (out_head + chunk)[:2048] if len(out_head) < 2048 else out_head
                over = out_total > job["max_output_bytes"]
            elif fd == ev_r:
                events += chunk[:4096]
            else:
                res += chunk
                res_done = not chunk or (len(res) >= 4 and len(res) >= 4 + struct.unpack(">I", res[:4])[0])
            if not chunk and fd != jfd:
                watch.remove(fd)
        if over:
            break
    duration = time.monotonic() - t0
    c_status = kill_program(cpid, uid, judge.pid)
    events += _drain(ev_r)
    for fd in (out_r, ev_r):
        os.close(fd)
    shutil.rmtree(tmp, ignore_errors=True)
    blocked = {e for e in events.decode(errors="replace").split() if e}
    if isolation.clean_scratch(uid):
        blocked.add("write_outside")
    c_signal = os.WTERMSIG(c_status) if os.WIFSIGNALED(c_status) else None
    rec = {"timed_out": timed_out, "output_over": over, "output_head": out_head.decode(errors="replace"),
           "c_signal": c_signal, "judge": res if res_done else None, "duration_s": duration,
           "blocked": sorted(blocked)}
    return rec, not res_done or over or judge.jobs >= judge.max_jobs


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _drain(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096)
    except (BlockingIOError, OSError):
        return b""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def serve(sock: socket.socket) -> None:
    hello = pickle.loads(wire.recv(sock.fileno()))
    active = isolation.enter_namespaces(tuple(hello.get("hide_paths", ())))
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    uid = isolation.sandbox_uid()
    if uid is not None:
        active.append("own_uid")
    judge_mb = int(hello.get("judge_memory_mb", 4096))  # address space of the judge, which decodes values
    judge = JudgeProc(judge_mb)
    gc.freeze()  # keep imported objects out of the children's GC passes: fewer copy-on-write page faults
    wire.send(sock.fileno(), pickle.dumps({"pid": os.getpid(), "active": active}))
    while True:
        try:
            head, fds, _, _ = socket.recv_fds(sock, 4, 2)
            if not head:
                return
            head += _recv_exact(sock, 4 - len(head))
            (n,) = struct.unpack(">I", head)
            job = pickle.loads(_recv_exact(sock, n))
        except (EOFError, OSError):
            return
        try:
            result, replace_judge = run_job(job, fds[0], fds[1], uid, judge)
        except Exception as e:  # noqa: BLE001 - keep serving; the parent sees an error for this job
            result, replace_judge = {"fatal": f"{type(e).__name__}: {e}"}, True
        if replace_judge:
            judge.kill()
            judge = JudgeProc(judge_mb)
        wire.send(sock.fileno(), pickle.dumps(result))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop (Ctrl-C goes to it)
    serve(socket.socket(fileno=int(sys.argv[1])))
