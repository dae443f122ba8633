"""The judge: the supervisor's long-lived child that runs each job's tests in a process of its own.

`JudgeProc` is the supervisor's handle (start, wait until ready, submit a job, kill); `_judge_server` the judge's
loop (fork the next job's `JobProc`, reap every process of the finished job, clean up); `_drop_root` the judge's
confinement once its setup is done; `_warm_up` a job of our own run before any real one. Imported by the
supervisor only, after the fork, so the zygote stays small.
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

from codechat.sandbox import candidate, cgroup, frames, isolation, judge_imports, modes, procs, rootfs, seccomp
from codechat.sandbox.job_proc import JOB_HEAD, JobProc
from codechat.sandbox.procs import _child_fds, _fork, _kill, die_with_parent

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
            socket.send_fds(self.sock, [JOB_HEAD.pack(max_bytes, cand_stat >= 0)], fds)
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
