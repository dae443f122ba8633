"""The supervisor: runs the parent's jobs, one at a time, for its zygote (see zygote.py for the layout).

A child of the zygote that never forks programs itself: it owns the connection to the parent, the judge (its
child), the temp dir and sockets of each spare, the deadline and the output cap, and it asks the zygote to fork
the next spare and to collect each program (`Forker`). Its work writes many pages per job; here, unlike in the
zygote, no program shares them, so that costs no copy-on-write faults. Modules only the supervisor and the
judge need are imported here, after the fork, so that the zygote stays small.
"""
from __future__ import annotations

import gc
import marshal
import os
import pickle
import resource
import select
import signal
import socket
import _socket
import struct
import sys
import time

from codechat.sandbox import (audit_hook, candidate, cgroup, frames, isolation, judge_imports, modes, procs, rootfs,
                              seccomp, tmp_drop, wire)
from codechat.sandbox.procs import _LIMITS, _REPLY, _REQ, _child_fds, _fork, _kill, die_with_parent


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


class Forker:
    """The supervisor's handle on the zygote, which does nothing but fork spares and wait for them.

    Requests (SOCK_SEQPACKET: one message each, fds attached): b"F" with the spare's four fds (its temp dir, at the zygote's fixed path, made ready) ->
    reply: its pid; b"W" pid: wait for a program already killed and shown to have left nothing (no reply);
    b"R" pid: kill and reap the program and every process it left -> reply: its wait status."""

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


READY_S = 2.0
"""Seconds the supervisor waits for the judge to be ready for the next job (normally a few ms) before it
replaces the judge instead."""


class JudgeProc:
    """The judge: a long-lived child that forks one process per job (`_judge_server`): a job's task code runs in
    a process no later job sees, forked from a pristine judge that never runs task code. It is replaced after
    a timeout, an output overflow, or state a job left that it cannot remove.

    Task code runs on the program's values (a test may `eval` what the program returned, a checker sympify it),
    so once its setup is done the judge gives up root (`_drop_root`): process 1 of its own PID namespace
    (everything it starts dies with it; it sees no other process), its own IPC and mount namespaces with a /tmp
    of its own, a uid no program shares (`isolation.judge_uid`), rlimits, no_new_privs, the programs' seccomp
    filter, no network (the zygote's empty network namespace), and a memory cgroup of its own (`cgroup.py`)."""

    def __init__(self, memory_mb: int, uid: int | None = None, carried: list[str] | None = None,
                 mem: cgroup.Memory | None = None):
        self.sock, child = socket.socketpair()
        parent_sock = self.sock
        own_pidns = uid is not None and bool(isolation.PROGRAM_NS)
        if own_pidns and procs._unshare(isolation.CLONE_NEWPID) != 0:
            raise OSError("cannot make a PID namespace for the judge")
        try:
            self.pid = _fork(lambda: (parent_sock.close(), _judge_server(child, memory_mb, uid, carried)))
        finally:  # back home: the next judge or reaper is forked here again
            if own_pidns and procs._setns(isolation.OWN_PIDNS_FD, isolation.CLONE_NEWPID) != 0:
                raise OSError("cannot return to the supervisor's PID namespace")
        child.close()
        # wait until it is in its own mount namespace: until then its /tmp setup and ours (Spare) would share one
        if self.sock.recv(1) != b"R":
            self.kill()
            raise OSError("the judge failed to give up root")
        if mem is not None:  # before it forks any job's process: they are all born inside
            mem.judge_join(self.pid, memory_mb << 20)
        self.sock.sendall(b"G")
        self.ready = False
        if not self.wait_ready():  # (its first job's process)
            self.kill()
            raise OSError("the judge did not start")

    def wait_ready(self, timeout_s: float = READY_S) -> bool:
        """Wait until the judge has cleaned up after its last job and forked the next job's process (it says
        b"R"); False when it ended instead (state it could not remove) or does not answer in time (a job's
        process that sent its record and then hung): the caller replaces it."""
        if self.ready:
            return True
        try:
            if select.select([self.sock], [], [], timeout_s)[0] and self.sock.recv(1) == b"R":
                self.ready = True
        except OSError:
            pass
        return self.ready

    def submit(self, sj: int, judge_r: int, max_bytes: int, cand_stat: int) -> int:
        """Hand the job to the judge's waiting job process; returns the read end of its result pipe."""
        self.ready = False
        res_r, res_w = os.pipe()
        fds = [sj, judge_r, res_w] + ([cand_stat] if cand_stat >= 0 else [])
        try:
            socket.send_fds(self.sock, [_JOB_HEAD.pack(max_bytes, cand_stat >= 0)], fds)
        except OSError:
            pass  # the judge is gone: the result pipe closes, the job errs, and the judge is replaced
        os.close(res_w)
        return res_r

    def kill(self) -> None:
        _kill(self.pid)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # (already reaped by `alive`)
            pass
        self.sock.close()


_JOB_HEAD = struct.Struct(">II")
"""supervisor -> judge per job: the result cap, whether the program's /proc/PID/stat comes as a third fd (its
CPU time, under time limits: /proc hides the program from the judge's uid)."""
JUDGE_TMP_OPTS = "mode=1777,size=64m,nr_inodes=4096"
JUDGE_RLIMITS = ((resource.RLIMIT_NPROC, 256), (resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_CORE, 0),
                 (resource.RLIMIT_FSIZE, 64 << 20))


def _drop_root(uid: int, carried: list[str] | None) -> None:
    """The judge's setup is done: give up root for good (see JudgeProc). Raises if any step fails: a judge
    that kept root must not run tests."""
    if procs._unshare(isolation.CLONE_NEWNS | isolation.CLONE_NEWIPC) != 0:
        raise OSError("cannot make mount and IPC namespaces for the judge")
    if carried is not None:  # a /tmp of its own, unseen by programs (and theirs unseen here)
        rootfs.fresh_tmp(None, uid, carried, JUDGE_TMP_OPTS)
        rootfs.drop_parked()  # a program's /tmp the supervisor had not yet unmounted when it forked us
    for res, n in JUDGE_RLIMITS:
        resource.setrlimit(res, (n, n))
    isolation.drop_privileges(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError("the judge still runs as root")
    die_with_parent()  # (setuid cleared it)
    if procs._SECCOMP and not seccomp.install(procs._prctl):
        raise OSError("cannot install the seccomp filter in the judge")


def _judge_server(sock: socket.socket, memory_mb: int, uid: int | None = None, carried: list[str] | None = None
                  ) -> None:
    """The pristine judge: never runs a job's task code itself. Each job runs in a process forked for it
    beforehand (`JobProc`), which takes the job straight from the supervisor and answers it straight back, so
    nothing a job's tests, setup or checker do (patching the judge's functions, evaluating the program's text)
    reaches a later job. Once that process exits, every process the job left is killed and reaped, the judge's
    /tmp emptied, the next job's process forked, and only then does the supervisor hear b"R" and send the next
    job (no process of a job is alive when the next one arrives). State it cannot remove (SysV IPC objects) ends
    this judge instead, and the supervisor starts another."""
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
    if uid is not None:
        _drop_root(uid, carried)
    pid_one = os.getpid() == 1  # its own PID namespace: kill(-1) reaches exactly the jobs' processes
    warm = judge_imports.Warm()
    _warm_up()
    gc.collect()
    gc.freeze()  # the jobs' processes then never touch these objects' pages in a GC pass: fewer copies per fork
    sock.sendall(b"R")  # root given up (JudgeProc waits for it) ...
    if sock.recv(1) != b"G":  # ... and moves us into the judge's cgroup before any job's process is forked
        return
    while True:
        job = JobProc(sock, pid_one)
        sock.sendall(b"R")
        closed = job.wait()
        _end_job(job.pid, pid_one)
        learned = job.modules()
        if closed or not _clean_after_job(carried if uid is not None else None):
            return  # the supervisor is done, or a job left state a later job could see: it replaces us
        if warm.learn(learned):
            gc.collect()
            gc.freeze()


JOB_CLOSED = 3
"""Exit status of a job process whose supervisor closed the connection instead of sending a job."""


class JobProc:
    """The process one job runs in, forked from the pristine judge before the job arrives. It takes the job
    (its fds) from the supervisor's socket, closes that socket before any task code runs (so nothing the job
    starts can take or answer a later job), runs it (`modes.judge`), writes the record to the job's own result
    pipe, and tells the judge which modules it imported (names only, for `judge_imports.Warm`)."""

    def __init__(self, sock: socket.socket, pid_one: bool):
        self.names_r, names_w = os.pipe()
        before = set(sys.modules)
        # libc's fork, not os.fork: the judge is single-threaded, so Python's after-fork handlers have nothing to
        # repair, and running them (threading's, inherited from the supervisor) copies ~150 pages per job
        self.pid = procs._libc.fork()
        if self.pid < 0:
            raise OSError("cannot fork the job's process")
        if self.pid == 0:
            code = 0
            try:
                os.close(self.names_r)
                if not pid_one:
                    os.setpgid(0, 0)
                code = self._serve(sock, names_w, before)
            except BaseException:  # noqa: BLE001 - a child must never return into the judge's loop
                code = 70
            os._exit(code)
        os.close(names_w)

    @staticmethod
    def _serve(sock: socket.socket, names_w: int, before: set) -> int:
        head, fds, _, _ = socket.recv_fds(sock, _JOB_HEAD.size, 4)
        sock.close()
        if len(head) != _JOB_HEAD.size or len(fds) < 3:
            return JOB_CLOSED
        max_bytes, has_stat = _JOB_HEAD.unpack(head)
        try:
            rec = modes.judge(fds[0], fds[1], max_bytes, fds[3] if has_stat and len(fds) > 3 else -1)
        except BaseException as e:  # noqa: BLE001 - report
            rec = wire.dumps({"status": "error", "error_type": "JudgeError",
                              "message": f"{type(e).__name__}: {e}"[:300]})
        frames.send(fds[2], rec)
        os.set_blocking(names_w, False)  # (a full pipe drops the names: they only save later imports)
        try:
            os.write(names_w, " ".join(sorted(set(sys.modules) - before)).encode()[:4096])
        except OSError:
            pass
        return 0

    def wait(self) -> bool:
        """Wait for the job's process to end; whether it ended because the supervisor closed the connection."""
        _, status = os.waitpid(self.pid, 0)
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == JOB_CLOSED

    def modules(self) -> list[str]:
        """The modules the job imported (read once every process of the job is gone: nothing else writes)."""
        os.set_blocking(self.names_r, False)
        try:
            data = os.read(self.names_r, 4096)
        except OSError:
            data = b""
        os.close(self.names_r)
        return data.decode(errors="replace").split()


WARM_UP = ({"code": "def f(a, b):\n    return a + b\n", "setup": "", "mode": "tests"},
           {"mode": "tests", "prelude": "", "setup": "", "entry_point": "f", "tests": ["assert f(1, 2) == 3"],
            "inputs": [], "expected": [], "atol": 0.0, "stdio": {}, "time_limits": {}})
"""Our own job (program and tests), run once in the pristine judge before any real job."""


def _warm_up() -> None:
    """Run `WARM_UP` here, in the pristine judge, against a candidate forked for it: the judging code then has
    run (Python specialises a function's bytecode in place as it runs), so each job's fork copies fewer pages."""
    sj, sc = socket.socketpair()
    cand_r, cand_w = os.pipe()
    judge_r, judge_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            sj.close()
            devnull = os.open(os.devnull, os.O_WRONLY)
            candidate.serve(sc.fileno(), cand_r, devnull)
        finally:
            os._exit(0)
    try:
        sc.close()
        frames.send(cand_w, marshal.dumps(WARM_UP[0]))
        frames.send(judge_w, pickle.dumps(WARM_UP[1]))
        modes.judge(sj.fileno(), judge_r, 1 << 20)
    except (OSError, frames.WireError):
        pass
    finally:
        for fd in (cand_r, cand_w, judge_r, judge_w):
            os.close(fd)
        sj.close()
        _kill(pid)
        os.waitpid(pid, 0)


def _end_job(pid: int, pid_one: bool) -> None:
    """Kill and reap every process of the job. As process 1 of its own PID namespace, kill(-1) reaches every
    other process in it and every orphan is re-parented here: when waitpid says no child is left, none is."""
    if pid_one:
        while True:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
    else:  # (without root: no PID namespace; the job's process group, which its code could leave)
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _kill(pid)
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return


def _clean_after_job(carried: list[str] | None) -> bool:
    """Empty the judge's own /tmp (a tmpfs only the judge sees: `carried` bindings stay) and check that the job
    left no SysV IPC object; False when something could not be removed."""
    if carried is not None:
        keep = {p[len("/tmp/"):].split("/", 1)[0] for p in carried}
        try:
            names = os.listdir("/tmp")
        except OSError:
            return False
        for name in names:
            if name not in keep:
                isolation.rmtree(os.path.join("/tmp", name))
                if os.path.lexists(os.path.join("/tmp", name)):
                    return False
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                if len(f.read().splitlines()) > 1:  # (a header line, then one line per object)
                    return False
        except OSError:
            pass
    return True


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
