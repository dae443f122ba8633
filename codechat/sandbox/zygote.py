"""The zygote: a warm, pre-imported process that forks one program at a time; its supervisor runs the job.

Started by `pool.py` as `python -m codechat.sandbox.zygote FD` with a scrubbed environment, it enters its own
network and mount namespaces once (`isolation.enter_namespaces`), becomes a child subreaper, and forks its
supervisor, which owns the socket to the parent and forks the judge. From then on the zygote only forks spares
and waits for programs, as the supervisor asks (`procs.serve_forks`): every page a process writes while a child
shares it is copied, so the process that forks must do as little as possible between forks.
  parent -> supervisor: a small control record (limits, timeout) plus two pipe fds, one holding the program's
      payload and one holding the judge's payload. Neither the supervisor nor the zygote reads either
      payload, so no later child can find earlier tests in memory it inherits (the zygote does not even see
      the records of earlier jobs).
  supervisor -> parent: what it observed (timeout, output over the cap, exit signal, protections hit) plus
      the judge's result record, still encoded.
Per job, a pre-forked candidate (`procs.Spare`: own session, fresh temp dir owned by the sandbox uid) gets its
limits and payload; the judge gets the tests; a wall-clock deadline runs; then the program and everything it
created is killed, the temp dir removed, and the next spare forked while the parent reads the result.
Forking from here costs well under a millisecond; exec-ing a fresh interpreter costs tens.
"""
from __future__ import annotations

import ctypes
import gc
import os
import pickle
import select
import signal
import socket
import struct
import sys
import time

from codechat.sandbox import isolation, procs, wire
from codechat.sandbox.procs import JudgeProc, Spare, recv_exact

# Imported once here so that forked programs do not pay for them (copy-on-write after fork).
# Only small, common ones: each extension module adds mappings, and fork time grows with them (random and
# tempfile pull in OpenSSL through hashlib and make every fork ~0.3 ms slower; a program importing them pays once).
import bisect, collections, copy as _copy, functools, heapq, itertools, math, operator, re, string, typing  # noqa: E401,F401,E501

PR_SET_CHILD_SUBREAPER = 36


def run_job(job: dict, spare: Spare, cand_r: int, judge_r: int, judge: JudgeProc, zygote_pid: int
            ) -> tuple[dict, bool]:
    """Run one job on `spare`; returns (record for the parent, whether the judge must be replaced).
    The program is collected by the zygote before this returns; the caller closes the spare after replying."""
    t0 = time.monotonic()
    try:
        spare.start(job["limits"], cand_r)
    except OSError:
        pass  # the spare died early: the judge sees the channel close and reports it
    judge.submit(spare.sj.fileno(), judge_r, job["max_result_bytes"])
    for fd in (cand_r, judge_r):
        os.close(fd)
    deadline = t0 + job["timeout_s"]
    out_head, out_total, events, res = b"", 0, b"", b""
    timed_out = over = res_done = False
    jfd = judge.sock.fileno()
    watch = [spare.out_r, jfd, spare.ev_r]
    while not res_done:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(watch, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if fd == spare.out_r:
                out_total += len(chunk)
                out_head = (out_head + chunk)[:2048] if len(out_head) < 2048 else out_head
                over = out_total > job["max_output_bytes"]
            elif fd == spare.ev_r:
                events += chunk[:4096]
            else:
                res += chunk
                res_done = not chunk or (len(res) >= 4 and len(res) >= 4 + struct.unpack(">I", res[:4])[0])
            if not chunk and fd != jfd:
                watch.remove(fd)
        if over:
            break
    duration = time.monotonic() - t0
    clean = procs.stop_program(spare.pid, zygote_pid, os.getpid())
    # fast path: the zygote only collects the (killed) program; slow path: it waits for the program (its exit
    # status explains an early end) and reaps every descendant
    c_status = spare.collect(clean and res_done and not over and b'"EarlyExit"' not in res)
    os.set_blocking(spare.ev_r, False)
    try:
        events += os.read(spare.ev_r, 4096)
    except OSError:
        pass
    blocked = {e for e in events.decode(errors="replace").split() if e}
    if isolation.clean_scratch(spare.uid, keep=spare.tmp):
        blocked.add("write_outside")
    c_signal = os.WTERMSIG(c_status) if os.WIFSIGNALED(c_status) else None
    rec = {"timed_out": timed_out, "output_over": over, "output_head": out_head.decode(errors="replace"),
           "c_signal": c_signal, "judge": res if res_done else None, "duration_s": duration,
           "blocked": sorted(blocked)}
    return rec, not res_done or over or judge.jobs >= judge.max_jobs


def supervise(sock: socket.socket, zsock: socket.socket, uid: int | None, judge_mb: int, active: list[str]) -> None:
    """The supervisor (a child of the zygote): serves the parent's jobs, one at a time."""
    procs.die_with_parent()
    from codechat.sandbox import modes  # noqa: F401 - for the judges forked from here (not in the zygote)
    zygote_pid = os.getppid()
    forker = procs.Forker(zsock)
    judge = JudgeProc(judge_mb)
    spare = Spare(uid, forker)
    wire.send(sock.fileno(), pickle.dumps({"pid": zygote_pid, "active": active, "uid": uid}))
    while True:
        try:
            head, fds, _, _ = socket.recv_fds(sock, 4, 2)
            if not head:
                break
            head += recv_exact(sock, 4 - len(head))
            job = pickle.loads(recv_exact(sock, struct.unpack(">I", head)[0]))
        except (EOFError, OSError):
            break
        try:
            result, replace_judge = run_job(job, spare, fds[0], fds[1], judge, zygote_pid)
        except Exception as e:  # noqa: BLE001 - keep serving; the parent sees an error for this job
            result, replace_judge = {"fatal": f"{type(e).__name__}: {e}"}, True
            try:
                if not spare.collected:
                    spare.collect(False)
            except (OSError, EOFError):  # the zygote is gone: nothing more can run here
                wire.send(sock.fileno(), pickle.dumps(result))
                break
        wire.send(sock.fileno(), pickle.dumps(result))
        spare.close()
        if replace_judge:
            judge.kill()
            judge = JudgeProc(judge_mb)
        spare = Spare(uid, forker)
    try:
        if not spare.collected:
            spare.collect(False)
    except (OSError, EOFError):
        pass
    spare.close()
    judge.kill()


def serve(sock: socket.socket) -> None:
    hello = pickle.loads(wire.recv(sock.fileno()))
    active = isolation.enter_namespaces(tuple(hello.get("hide_paths", ())))
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    uid = isolation.sandbox_uid()
    if uid is not None:
        active.append("own_uid")
    judge_mb = int(hello.get("judge_memory_mb", 4096))  # address space of the judge, which decodes values
    zsock, ssock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sup = procs._fork(lambda: (zsock.close(), supervise(sock, ssock, uid, judge_mb, active)))
    sock.close()
    ssock.close()
    del hello
    gc.collect()
    gc.freeze()  # keep imported objects out of the children's GC passes: fewer copy-on-write page faults
    ctypes.CDLL(None).malloc_trim(0)  # hand free heap back to the OS: fewer page-table entries to copy per fork
    try:
        procs.serve_forks(zsock, uid, sup)
    except (OSError, EOFError):
        pass
    # the supervisor is gone (the parent closed the connection, or it failed): leave nothing behind
    procs.reap_program(sup, uid, 0)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop (Ctrl-C goes to it)
    serve(socket.socket(fileno=int(sys.argv[1])))
