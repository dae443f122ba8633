"""The process one job of the judge runs in (`JobProc`), and the supervisor -> job message it reads.

Forked from the pristine judge (judge_proc.py) before the job arrives, so that nothing a job's task code does
reaches a later job. Imported by the supervisor only, after the fork, so the zygote stays small.
"""
from __future__ import annotations

import os
import socket
import struct
import sys

from codechat.sandbox import frames, modes, procs, wire

JOB_HEAD = struct.Struct(">II")
"""supervisor -> judge per job: the result cap, whether the program's /proc/PID/stat comes as a third fd (its
CPU time, under time limits: /proc hides the program from the judge's uid)."""

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
        head, fds, _, _ = socket.recv_fds(sock, JOB_HEAD.size, 4)
        sock.close()
        if len(head) != JOB_HEAD.size or len(fds) < 3:
            return JOB_CLOSED
        max_bytes, has_stat = JOB_HEAD.unpack(head)
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
