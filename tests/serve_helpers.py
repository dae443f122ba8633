"""Start `codechat serve` for real (a subprocess on a free port) and wait until it answers."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def served(*args: str, env: dict | None = None):
    """Yields (base URL, process); stops the server (SIGTERM) afterwards."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    # stderr to a file, not a pipe nobody reads: a server logging more than a pipe holds would block on it
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-m", "codechat", "serve", "--port", "0", *args], env=e,
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
    proc.log = log
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://\S+:(\d+)", line)
        assert m, f"no listening line: {line!r} {server_log(proc) if proc.poll() is not None else ''}"
        url = f"http://127.0.0.1:{m.group(1)}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "server did not become healthy"
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def server_log(proc) -> str:
    """What the server wrote to stderr so far."""
    proc.log.seek(0)
    return proc.log.read()


def zygote_pids(server_pid: int) -> list[int]:
    """The sandbox workers (zygote processes) the server started."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and b"codechat.sandbox.zygote" in cmd:
            pids.append(int(d.name))
    return pids
