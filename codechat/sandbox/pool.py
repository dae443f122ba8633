"""Parent side of the sandbox: a pool of zygotes, one job at a time each, and the typed result of a job.

`SandboxPool(workers).run(Job(...)) -> RunResult` is thread-safe: each call borrows an idle zygote. A zygote
that dies or stops answering is killed and replaced; the job gets status `infra_error`. When some protection is not
available on this machine, one warning lists which ones are active.
"""
from __future__ import annotations

import json
import marshal
import os
import pickle
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from codechat.sandbox import cancel, cgroup, frames, wire
from codechat.sandbox.protections import (ALL_PROTECTIONS, ALWAYS, PROTECTIONS,  # noqa: F401 (re-exported)
                                           missing_protections_message, protection_report)
from codechat.sandbox.isolation import Limits

_END = object()
_warned = False


@dataclass
class Job:
    """One program to run: the candidate's code (+ setup) and what the judge does with it."""
    mode: str
    """`tests` (run task tests), `io` (compare outputs with `expected`), `call` (return outputs),
    `stdio` (run as `__main__` on `stdin`, compare its stdout with `expected[0]`)."""
    code: str
    setup: str = ""
    entry_point: str | None = None
    tests: list[str] = field(default_factory=list)
    inputs: list[list] = field(default_factory=list)
    expected: list = field(default_factory=list)
    atol: float = 0.0
    timeout_s: float = 5.0
    limits: Limits = field(default_factory=Limits)
    max_output_bytes: int = 65536
    max_result_bytes: int = 16 << 20
    stdin: bytes = b""
    """Mode `stdio`: the program's standard input (the candidate gets only this test's input)."""
    files: dict = field(default_factory=dict)
    """Mode `stdio`: {relative path: bytes} written into the program's working directory before it runs."""
    stdio: dict = field(default_factory=dict)
    """Mode `stdio`, judge side only: `input`, `float_tol`, `checker`, `cpu_limit_s` (see sandbox/stdio_judge.py)."""
    prelude: str = ""
    """Task-authored code run in the judge before `setup` (a HumanEval prompt's imports and helpers): the
    names it defines are the task's, and the program cannot replace them for the tests."""
    time_limits: dict = field(default_factory=dict)
    """Mode `tests`, judge side: {test_s, total_s, cpu} per-test and total limits kept by the judge
    (sandbox/timelimits.py); empty = only `timeout_s`, enforced by the supervisor."""


@dataclass
class RunResult:
    """What happened, merged from the zygote's observations and the judge's record."""
    status: str
    error_type: str | None = None
    message: str = ""
    tests_passed: int = 0
    duration_s: float = 0.0
    blocked: tuple[str, ...] = ()
    outputs: list[Any] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    output_head: str = ""
    cpu_s: float = 0.0
    """The program's CPU seconds as the judge measured them (function tasks under CPU time limits), else 0."""


class Zygote:
    def __init__(self, hide_paths: tuple[str, ...]):
        parent, child = socket.socketpair()
        # -S: no `site` (its .pth processing imports pathlib, urllib, ...: a bigger zygote forks slower);
        # the package root and the site-packages dirs go on PYTHONPATH instead.
        import site  # in the parent only; the zygote itself runs without site
        paths = [str(Path(__file__).resolve().parents[2])] + [p for p in site.getsitepackages() if os.path.isdir(p)]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(paths), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen([sys.executable, "-S", "-m", "codechat.sandbox.zygote", str(child.fileno())],
                                     pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, start_new_session=True, cwd="/")
        child.close()
        self.sock = parent
        self.sock.settimeout(60)
        self.cgroup = cgroup.create(self.proc.pid)  # (the zygote joins it before it leaves the host's /sys)
        msg = json.dumps({"hide_paths": list(hide_paths), "cgroup": self.cgroup}).encode()  # (no pickle there)
        self.sock.sendall(struct.pack(">I", len(msg)) + msg)
        hello = pickle.loads(self._recv())
        self.active: list[str] = hello["active"]
        self.uid: int | None = hello["uid"]

    def run(self, job: Job) -> dict:
        """Send the job; returns the zygote's raw record. Raises OSError/EOFError if the zygote is broken."""
        self.submit(job)
        return self.collect()

    def submit(self, job: Job) -> None:
        """Send the job (the reply is read by `collect`). Raises OSError if the zygote is broken."""
        cand_r, cand_w = os.pipe()
        judge_r, judge_w = os.pipe()
        try:
            ctl = {k: getattr(job, k) for k in ("mode", "timeout_s", "limits", "max_output_bytes", "max_result_bytes")}
            ctl = pickle.dumps(ctl)
            self.sock.settimeout(job.timeout_s + 30)
            socket.send_fds(self.sock, [struct.pack(">I", len(ctl)) + ctl], [cand_r, judge_r])
            os.close(cand_r)
            os.close(judge_r)
            cand_r = judge_r = -1
            # Each payload goes down its own pipe: only the candidate reads the code, only the judge the tests.
            payload = {"code": str(job.code), "setup": str(job.setup), "mode": str(job.mode)}
            if job.mode == "stdio":
                payload["stdin"] = bytes(job.stdin)
                payload["files"] = {str(k): bytes(v) for k, v in job.files.items()}
            _write_quietly(cand_w, marshal.dumps(payload))
            _write_quietly(judge_w, pickle.dumps({
                "mode": job.mode, "prelude": job.prelude, "setup": job.setup, "entry_point": job.entry_point,
                "tests": job.tests, "inputs": job.inputs, "expected": job.expected, "atol": job.atol,
                "stdio": job.stdio, "time_limits": job.time_limits}))
        finally:
            for fd in (cand_r, judge_r, cand_w, judge_w):
                if fd >= 0:
                    os.close(fd)

    def collect(self) -> dict:
        """The raw record of the job sent last (waits for it, up to the socket timeout)."""
        return pickle.loads(self._recv())

    def _recv(self) -> bytes:
        (n,) = struct.unpack(">I", self._recv_exact(4))
        return self._recv_exact(n)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError("zygote closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except OSError:
            pass
        for _ in range(50):  # the zygote's last programs die with it (parent-death signal): then it is empty
            cgroup.remove(self.cgroup)
            if self.cgroup is None or not any(os.path.isdir(self.cgroup[k]) for k in cgroup.KEYS):
                break
            time.sleep(0.02)


def _write_quietly(fd: int, data: bytes) -> None:
    try:
        frames.send(fd, data)
    except (BrokenPipeError, OSError):
        pass  # the reader died before reading: the zygote reports what happened


MAX_ERROR_TYPE = 200
MAX_MESSAGE = 2048
MAX_BLOCKED = 32
_STATUSES = frozenset({"passed", "failed", "error", "syntax_error", "timeout", "memory", "output_limit", "ok"})
"""Bounds on what reaches a RunResult (and a Verdict) from a job, whatever the program made its parts say."""


def _signal_name(sig) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:  # real-time signals (SIGRTMIN..SIGRTMAX) have no enum member
        return f"signal {int(sig)}"


def merge(raw: dict | None) -> RunResult:
    """Combine the zygote's observations with the judge's result record into one RunResult. Never raises: a
    record that cannot be merged is that job's `error`, so one program cannot spoil its batch."""
    try:
        return _merge(raw)
    except Exception as e:  # noqa: BLE001
        return RunResult("error", "SandboxError", f"unreadable sandbox record ({type(e).__name__})")


def _merge(raw: dict | None) -> RunResult:
    if raw is None or "fatal" in raw:
        fatal = str((raw or {}).get("fatal", "no reply"))[:MAX_MESSAGE]
        return RunResult("infra_error", "SandboxError", f"the sandbox failed: {fatal}")
    blocked = tuple(str(b)[:MAX_ERROR_TYPE] for b in list(raw["blocked"])[:MAX_BLOCKED])
    base = dict(duration_s=float(raw["duration_s"]), blocked=blocked, output_head=str(raw["output_head"])[:4096])
    if raw["output_over"]:
        return RunResult("output_limit", None, "output exceeded the cap", **base)
    if raw["timed_out"] or raw["c_signal"] == signal.SIGXCPU:
        return RunResult("timeout", None, "time limit reached", **base)
    oom = RunResult("memory", "MemoryError", "the program's processes went over the memory limit", **base)
    if raw["judge"] is None:
        return oom if raw.get("oom") else RunResult("error", "JudgeError", "the judge produced no result", **base)
    try:
        (n,) = struct.unpack(">I", raw["judge"][:4])
        rec = wire.loads(raw["judge"][4:4 + n])
    except (wire.WireError, struct.error):
        return RunResult("error", "JudgeError", "unreadable judge result", **base)
    if not isinstance(rec, dict) or rec.get("status") not in _STATUSES:
        return RunResult("error", "JudgeError", "malformed judge result", **base)
    if raw.get("oom") and rec["status"] not in ("passed", "ok"):  # killed for memory: that is why it failed
        return oom
    msg = wire.cut(rec.get("message") or "", MAX_MESSAGE)
    etype = rec.get("error_type")
    etype = None if etype is None else wire.cut(etype, MAX_ERROR_TYPE)
    if etype == "EarlyExit" and raw["c_signal"] not in (None, signal.SIGKILL):
        msg += f" (killed by {_signal_name(raw['c_signal'])})"
    outputs, errors = rec.get("outputs", []), rec.get("errors", [])
    cpu = rec.get("cpu_s", 0.0)
    return RunResult(rec["status"], etype, msg[:MAX_MESSAGE], int(rec.get("tests_passed", 0)),
                     cpu_s=float(cpu) if type(cpu) in (int, float) else 0.0,
                     outputs=outputs if isinstance(outputs, list) else [],
                     errors=errors if isinstance(errors, list) else [], **base)


class SandboxPool:
    def __init__(self, workers: int, hide_paths: tuple[str, ...] = (), warn: bool = True):
        self.workers = workers
        self.hide_paths = hide_paths
        self._idle: queue.Queue[Zygote | None] = queue.Queue()  # None: a slot whose zygote must be (re)started
        self._all: list[Zygote] = []
        self._lock = threading.Lock()
        self._closed = False
        self.active: list[str] = []
        for _ in range(workers):
            self._idle.put(self._start())
        if warn:  # (`codechat verify --check` prints the full report instead)
            self._warn_once()

    def _start(self) -> Zygote:
        z = Zygote(self.hide_paths)
        with self._lock:
            self._all.append(z)
            self.active = z.active
        return z

    def _warn_once(self) -> None:
        global _warned
        message = missing_protections_message(self.active)
        if message and not _warned:
            _warned = True
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def sandbox_uids(self) -> list[int]:
        """The uids programs run under (one per zygote); empty when not running as root."""
        with self._lock:
            return [z.uid for z in self._all if z.uid is not None]

    def run(self, job: Job) -> RunResult:
        if self._closed:
            raise RuntimeError("the sandbox pool is closed")
        z = cancel.borrow(self._idle)
        c, raw, killed = cancel.current(), None, False
        try:
            if z is None:
                z = self._start()
            if c is not None:
                c.hold(z.proc.pid)
            try:
                raw = z.run(job)
            finally:
                killed = c is not None and c.release(z.proc.pid)
            if killed:
                raise EOFError("cancelled")
        except (OSError, EOFError, wire.WireError, pickle.UnpicklingError):
            if z is not None:
                self._discard(z)  # broken, hung or cancelled: the next job on this slot starts a fresh zygote
            z = None
        finally:
            self._idle.put(z)
        if killed:
            raise cancel.Cancelled("the request was cancelled")
        return merge(raw)

    def run_many(self, jobs: Iterable[Job | None]) -> Iterator[RunResult | None]:
        """Results in input order (None for a None job), computed on every zygote this call can borrow, from one
        thread: no thread pool, no hand-offs between threads. At most two jobs per zygote wait in order."""
        if self._closed:
            raise RuntimeError("the sandbox pool is closed")
        c = cancel.current()
        slots = [cancel.borrow(self._idle)]  # at least one zygote (waits if other threads hold them all)
        while True:
            try:
                slots.append(self._idle.get_nowait())
            except queue.Empty:
                break
        free = list(range(len(slots)))
        busy: dict[int, tuple[int, float]] = {}  # slot -> (index of its job, deadline)
        done: dict[int, RunResult | None] = {}
        it = iter(jobs)
        nxt = submitted = 0
        exhausted = False
        try:
            while True:
                if c is not None and c.cancelled:
                    raise cancel.Cancelled("the request was cancelled")
                while free and not exhausted and submitted - nxt < 2 * len(slots):
                    job = next(it, _END)
                    if job is _END:
                        exhausted = True
                        break
                    i, submitted = submitted, submitted + 1
                    if job is None:
                        done[i] = None
                        continue
                    k = free.pop()
                    try:
                        if slots[k] is None:
                            slots[k] = self._start()
                        if c is not None:
                            c.hold(slots[k].proc.pid)
                        slots[k].submit(job)
                        busy[k] = (i, time.monotonic() + job.timeout_s + 30)
                    except (OSError, EOFError, wire.WireError, pickle.UnpicklingError):
                        slots[k] = self._broken(slots[k])
                        free.append(k)
                        done[i] = merge(None)
                while nxt in done:
                    yield done.pop(nxt)
                    nxt += 1
                if not busy:
                    if exhausted and nxt == submitted:
                        return
                    continue
                by_fd = {slots[k].sock.fileno(): k for k in busy}
                wait = max(0.0, min(d for _, d in busy.values()) - time.monotonic())
                ready, _, _ = select.select(list(by_fd), [], [], wait)
                now = time.monotonic()
                for k in [by_fd[fd] for fd in ready] + [k for k, (_, d) in busy.items() if d <= now]:
                    if k not in busy:
                        continue
                    i, deadline = busy.pop(k)
                    try:
                        if deadline <= now and slots[k].sock.fileno() not in ready:
                            raise TimeoutError("the zygote stopped answering")
                        raw = slots[k].collect()
                        if c is not None and c.release(slots[k].proc.pid):
                            raise EOFError("cancelled")
                        done[i] = merge(raw)
                    except (OSError, EOFError, wire.WireError, pickle.UnpicklingError):
                        slots[k] = self._broken(slots[k])
                        done[i] = merge(None)
                    free.append(k)
        finally:
            for k in busy:  # abandoned mid-way (the caller stopped or was cancelled): the reply is unknown
                slots[k] = self._broken(slots[k])
            if c is not None and c.cancelled:  # a zygote released after the kill may be dead too
                slots = [self._broken(z) for z in slots]
            for z in slots:
                self._idle.put(z)

    def _broken(self, z: Zygote | None) -> None:
        if z is not None:
            self._discard(z)
        return None

    def _discard(self, z: Zygote) -> None:
        with self._lock:
            self._all.remove(z)
        try:
            os.killpg(z.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        z.close()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            zs, self._all = list(self._all), []
        for z in zs:
            z.close()
