"""The zygote: a warm, pre-imported process that runs one program at a time, judged by its judge child.

Started by `pool.py` as `python -m codechat.sandbox.zygote FD` with a scrubbed environment, it enters its own
network and mount namespaces once (`isolation.enter_namespaces`), forks its judge, then serves jobs on a unix
socket:
  parent -> zygote: a small control record (limits, timeout) plus two pipe fds, one holding the program's
      payload and one holding the judge's payload. The zygote never reads either payload, so no later child
      can find earlier tests in inherited memory.
  zygote -> parent: what it observed (timeout, output over the cap, exit signal, protections hit) plus the
      judge's result record, still encoded.
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


def run_job(job: dict, spare: Spare, cand_r: int, judge_r: int, judge: JudgeProc) -> tuple[dict, bool]:
    """Run one job on `spare`; returns (record for the parent, whether the judge must be replaced).
    The caller must call `finish_job` after replying."""
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
    clean = procs.stop_program(spare.pid, judge.pid)
    c_status = 0
    if not (clean and res_done and not over and b'"EarlyExit"' not in res):
        # slow path: wait for the program (its exit status explains an early end) and reap every descendant
        c_status = procs.reap_program(spare.pid, spare.uid, judge.pid)
        spare.pid = 0
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


def finish_job(spare: Spare, judge_pid: int) -> None:
    """After the reply: wait for the (already killed) program, remove its temp dir."""
    if spare.pid:
        procs.reap_program(spare.pid, spare.uid, judge_pid)
    spare.close()


def serve(sock: socket.socket) -> None:
    hello = pickle.loads(wire.recv(sock.fileno()))
    active = isolation.enter_namespaces(tuple(hello.get("hide_paths", ())))
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    uid = isolation.sandbox_uid()
    if uid is not None:
        active.append("own_uid")
    judge_mb = int(hello.get("judge_memory_mb", 4096))  # address space of the judge, which decodes values
    judge = JudgeProc(judge_mb)
    gc.collect()
    gc.freeze()  # keep imported objects out of the children's GC passes: fewer copy-on-write page faults
    ctypes.CDLL(None).malloc_trim(0)  # hand free heap back to the OS: fewer page-table entries to copy per fork
    spare = Spare(uid)
    wire.send(sock.fileno(), pickle.dumps({"pid": os.getpid(), "active": active, "uid": uid}))
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
            result, replace_judge = run_job(job, spare, fds[0], fds[1], judge)
        except Exception as e:  # noqa: BLE001 - keep serving; the parent sees an error for this job
            result, replace_judge = {"fatal": f"{type(e).__name__}: {e}"}, True
        wire.send(sock.fileno(), pickle.dumps(result))
        finish_job(spare, judge.pid)
        if replace_judge:
            judge.kill()
            judge = JudgeProc(judge_mb)
        spare = Spare(uid)
    procs.reap_program(spare.pid, uid, judge.pid)
    spare.close()
    judge.kill()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop (Ctrl-C goes to it)
    serve(socket.socket(fileno=int(sys.argv[1])))
