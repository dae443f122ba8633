"""Warm test runs: the parent's side of `sandbox/warm_runner.py`, one warm process per interpreter.

    warm = WarmRunner()
    res = warm.run(python, spec, root, pythonpath, timeout_s, limits, cap, hide_paths, binds)  # ExecResult | None
    warm.close()

`run` returns what `workspace.run_isolated` returns for the cold `python -I repo_runner.py` (output, result
pipe, status), or None when the run must be cold: the warm process cannot start for that interpreter (its
error is kept in `broken`), or the tree holds a module the warm process imported that a cold run would have
taken from the tree (`_pytest/` itself, or a name in its `extra` list). The deadline covers the run from the
fork: the interpreter's start-up is no longer part of `test_timeout_s`. Every process of a run is killed
afterwards, as for a cold run (`isolation.reap_uid` on its own uid and session), by the warm process (forking
that small process costs less than forking the judge's), or from here when the warm process is gone.
"""
from __future__ import annotations

import array
import json
import os
import select
import socket
import subprocess
import threading
import time
from pathlib import Path

from codechat.sandbox import isolation
from codechat.sandbox.workspace import EXEC_ENV, ExecResult, _read_capped, python_binds

WARM_RUNNER = str(Path(__file__).resolve().parents[1] / "sandbox" / "warm_runner.py")
START_TIMEOUT_S = 120.0


class _Proc:
    def __init__(self, python: str):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.lock = threading.Lock()
        try:
            self.popen = subprocess.Popen([python, "-I", WARM_RUNNER, str(b.fileno())], env=dict(EXEC_ENV), cwd="/",
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, pass_fds=(b.fileno(),), start_new_session=True)
        finally:
            b.close()
        self.sock = a
        a.settimeout(START_TIMEOUT_S)
        try:
            hello = json.loads(a.recv(1 << 20) or b"null")
        except (OSError, ValueError):
            hello = None
        if not isinstance(hello, dict):
            self.close()
            err = self.popen.stderr.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["no reply"]
            raise OSError(f"warm runner for {python} did not start: {err[0][:300]}")
        self.popen.stderr.close()
        a.settimeout(None)
        self.extra = set(hello.get("extra", ())) | {"_pytest"}

    def ask(self, req: dict, fds: list[int] = ()) -> dict:
        with self.lock:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
            self.sock.sendmsg([json.dumps(req).encode()], anc)
            reply = self.sock.recv(65536)
        if not reply:
            raise OSError("the warm runner exited")
        return json.loads(reply)

    def close(self) -> None:
        self.sock.close()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def tree_names(root: Path, pythonpath: list[str]) -> set[str]:
    """Top-level module names the tree offers on its import path (root and the environment's pythonpath)."""
    names = set()
    for d in [root / p for p in pythonpath] + [root]:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                names.add(e.name)
            elif e.name.endswith((".py", ".so", ".pyc")):
                names.add(e.name.split(".", 1)[0])
    return names


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X")
    except OSError:
        return True


def _exits_by(pid: int, deadline: float) -> bool:
    """Whether the run's process exits before the deadline (it is the warm process's child, not reaped before
    the wait request: its pid cannot be reused meanwhile). A pidfd wakes at the exit; /proc is polled where
    pidfds are missing."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        while not _gone(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True
    try:
        return bool(select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0])
    finally:
        os.close(fd)


class WarmRunner:
    """Warm processes by interpreter, started on first use; safe to use from several threads."""

    def __init__(self):
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.Lock()
        self.broken: dict[str, str] = {}
        """Interpreter -> why its warm process could not start (those run cold)."""
        self.runs = self.cold = 0
        """Runs made warm; runs sent back cold (a tree shadowing a warm module, no warm process)."""

    def _proc(self, python: str) -> _Proc | None:
        with self._lock:
            if python in self.broken:
                return None
            if python not in self._procs:
                try:
                    self._procs[python] = _Proc(python)
                except OSError as e:
                    self.broken[python] = str(e)
                    return None
            return self._procs[python]

    def run(self, python: str, spec: bytes, root: Path, pythonpath: list[str], timeout_s: float,
            limits: isolation.Limits, max_output_bytes: int, hide_paths: tuple[str, ...] = (),
            binds: tuple[str, ...] = (), max_channel_bytes: int = 16 << 20) -> ExecResult | None:
        proc = self._proc(python)
        if proc is None or tree_names(Path(root), pythonpath) & proc.extra:
            with self._lock:
                self.cold += 1
            return None
        req = {"workspace": str(Path(root).resolve()), "hide": list(hide_paths),
               "binds": python_binds() + list(binds), "rlimits": isolation.rlimits(limits), "env": EXEC_ENV}
        spec_r, spec_w = os.pipe()
        out_r, out_w = os.pipe()
        chan_r, chan_w = os.pipe()
        start = time.monotonic()
        try:
            pid = int(proc.ask(req, [spec_r, out_w, chan_w])["pid"])
        except (OSError, ValueError, KeyError) as e:  # the warm process is gone: this run and later ones go cold
            for fd in (spec_r, spec_w, out_r, out_w, chan_r, chan_w):
                os.close(fd)
            with self._lock:
                self.broken[python] = f"warm runner for {python} failed: {e}"
                self._procs.pop(python, None)
                self.cold += 1
            proc.close()
            return None
        for fd in (spec_r, out_w, chan_w):
            os.close(fd)
        try:
            try:
                os.write(spec_w, spec)
            except OSError:  # the run ended without reading
                pass
            os.close(spec_w)
            kept, truncated, timed_out, chan = _read_capped(out_r, chan_r, start + timeout_s, max_output_bytes,
                                                            max_channel_bytes)
            timed_out = timed_out or not _exits_by(pid, start + timeout_s)
        finally:
            os.close(out_r)
            os.close(chan_r)
            try:  # the warm process kills every process of the run, then reaps it
                status = proc.ask({"op": "wait", "pid": pid}).get("status", -1)
            except (OSError, ValueError):  # it died after the fork: killed from here; the next run finds it gone
                isolation.reap_uid(isolation.sandbox_uid(pid), pid)
                status = -1
        with self._lock:
            self.runs += 1
        text = kept.decode("utf-8", errors="replace")
        if timed_out:
            return ExecResult("timeout", None, text, truncated, time.monotonic() - start, chan)
        code = os.waitstatus_to_exitcode(status) if status >= 0 else None
        return ExecResult("ok", code, text, truncated, time.monotonic() - start, chan)

    def close(self) -> None:
        with self._lock:
            procs, self._procs = list(self._procs.values()), {}
        for p in procs:
            p.close()
