"""The supervisor: runs the parent's jobs, one at a time, for its zygote (see zygote.py for the layout).

A child of the zygote that never forks programs itself: it owns the connection to the parent, the judge (its
child, `judge_proc.py`), the temp dir and sockets of each spare (`spare.py`), the deadline and the output cap, and
it asks the zygote to fork the next spare and to collect each program (`Forker`). Its work writes many pages per
job; here, unlike in the zygote, no program shares them, so that costs no copy-on-write faults. Modules only the
supervisor and the judge need are imported here, after the fork, so that the zygote stays small.
"""
from __future__ import annotations

import os
import pickle
import select
import socket
import struct
import time

from codechat.sandbox import audit_hook, cgroup, frames, isolation, rootfs, tmp_drop
from codechat.sandbox.judge_proc import JudgeProc
from codechat.sandbox.procs import die_with_parent
from codechat.sandbox.spare import Forker, Spare, stop_program


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def run_job(job: dict, spare: Spare, cand_r: int, judge_r: int, judge: JudgeProc, zygote_pid: int,
            mem: cgroup.Memory | None = None) -> tuple[dict, bool]:
    """Run one job on `spare`; returns (record for the parent, whether the judge must be replaced).
    The program is collected by the zygote before this returns; the caller closes the spare after replying.
    `mem`: the zygote's memory cgroup, which the spare is already in: its limit is set here."""
    t0 = time.monotonic()
    try:
        cand_pid = spare.pid
    except (OSError, EOFError):  # the zygote is gone: the judge sees the channel close and reports it
        cand_pid = 0
    if mem is not None and cand_pid:  # before the program runs (it waits for `start`)
        mem.set_limit(job["limits"].memory_mb << 20)
        try:
            cgroup.set_oom_score(cand_pid, 1000)
        except OSError:
            pass  # the spare is already gone
    try:
        spare.start(job["limits"], cand_r)
    except OSError:
        pass  # the spare died early: the judge sees the channel close and reports it
    cand_stat = -1
    if cand_pid:
        try:
            cand_stat = os.open(f"/proc/{cand_pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass
    res_r = judge.submit(spare.sj.fileno(), judge_r, job["max_result_bytes"], cand_stat)
    for fd in (cand_r, judge_r) + ((cand_stat,) if cand_stat >= 0 else ()):
        os.close(fd)
    deadline = t0 + job["timeout_s"]
    out_head, out_total, events, res = b"", 0, b"", b""
    timed_out = over = res_done = False
    jfd = res_r
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
                # a stdin/stdout program's pipe is its stderr: debug output beyond the cap is dropped, never a
                # verdict (its stdout goes to the judge, under its own cap)
                over = out_total > job["max_output_bytes"] and job.get("mode") != "stdio"
            elif fd == spare.ev_r:
                events += chunk[:max(0, 4096 - len(events))]  # the program can write anything here
            else:
                res += chunk
                res_done = not chunk or (len(res) >= 4 and len(res) >= 4 + struct.unpack(">I", res[:4])[0])
            if not chunk and fd != jfd:
                watch.remove(fd)
        if over:
            break
    os.close(res_r)
    duration = time.monotonic() - t0
    clean = stop_program(spare.pid, zygote_pid, os.getpid(), spare.pid_ns)
    # fast path: the zygote only collects the (killed) program; slow path: it waits for the program (its exit
    # status explains an early end) and reaps every descendant
    c_status = spare.collect(clean and res_done and not over and b'"EarlyExit"' not in res)
    os.set_blocking(spare.ev_r, False)
    try:
        events += os.read(spare.ev_r, 4096)[:max(0, 4096 - len(events))]
    except OSError:
        pass
    blocked = set(events.decode(errors="replace").split()) & audit_hook.EVENT_KINDS
    if isolation.clean_scratch(spare.uid, keep=spare.tmp, remove=not spare.tmpfs):
        blocked.add("write_outside")
    c_signal = os.WTERMSIG(c_status) if os.WIFSIGNALED(c_status) else None
    rec = {"timed_out": timed_out, "output_over": over, "output_head": out_head.decode(errors="replace"),
           "oom": mem is not None and mem.new_oom_kill(),
           "c_signal": c_signal, "judge": res if res_done else None, "duration_s": duration,
           "blocked": sorted(blocked)}
    return rec, not res_done or over


def supervise(sock: socket.socket, zsock: socket.socket, uid: int | None, judge_mb: int, active: list[str],
              tmp: str, mem: cgroup.Memory | None = None) -> None:
    """The supervisor (a child of the zygote): serves the parent's jobs, one at a time."""
    die_with_parent()
    sock = socket.socket(fileno=sock.detach())  # the zygote uses bare _socket objects
    zygote_pid = os.getppid()
    forker = Forker(zsock)
    fresh = "fresh_root" in active
    layers = {"tmpfs": rootfs.tmp_mounts() if fresh else None, "pid_ns": "pid_namespace" in active,
              "drop": tmp_drop.Dropper() if fresh else None}
    judge_args = (judge_mb, isolation.judge_uid(zygote_pid) if uid is not None else None, layers["tmpfs"], mem)
    judge = JudgeProc(*judge_args)
    spare = Spare(uid, forker, tmp, **layers)
    frames.send(sock.fileno(), pickle.dumps({"pid": zygote_pid, "active": active, "uid": uid}))
    while True:
        try:
            head, fds, _, _ = socket.recv_fds(sock, 4, 2)
            if not head:
                break
            head += recv_exact(sock, 4 - len(head))
            job = pickle.loads(recv_exact(sock, struct.unpack(">I", head)[0]))
        except (EOFError, OSError):
            break
        if not judge.wait_ready():  # it ended after its last job (state it could not remove): a fresh one
            judge.kill()
            judge = JudgeProc(*judge_args)
        try:
            result, replace_judge = run_job(job, spare, fds[0], fds[1], judge, zygote_pid, mem)
        except Exception as e:  # noqa: BLE001 - keep serving; the parent sees an error for this job
            result, replace_judge = {"fatal": f"{type(e).__name__}: {e}"}, True
            try:
                if not spare.collected:
                    spare.collect(False)
            except (OSError, EOFError):  # the zygote is gone: nothing more can run here
                frames.send(sock.fileno(), pickle.dumps(result))
                break
        frames.send(sock.fileno(), pickle.dumps(result))
        spare.close()
        if replace_judge:
            judge.kill()
            judge = JudgeProc(*judge_args)
        spare = Spare(uid, forker, tmp, **layers)
    try:
        if not spare.collected:
            spare.collect(False)
    except (OSError, EOFError):
        pass
    spare.close()
    judge.kill()
