"""A minute of many clients on one `codechat serve`, some hostile: honest clients send /run_code and /verify
requests with known verdicts while others abandon endless programs, print lone surrogates, send crafted JSON,
hold half-open connections and stall their bodies. No honest verdict may be lost or wrong, and the server never
answers 500."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest

from serve_helpers import server_log, served

SOAK_S = float(os.environ.get("CODECHAT_SOAK_S", "60"))
TASK = {"task_id": "add", "prompt": "", "entry_point": "f", "tests": ["assert f(1, 2) == 3", "assert f(2, 2) == 4"]}
RIGHT, WRONG = "def f(a, b):\n    return a + b", "def f(a, b):\n    return a * b"


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.answered = self.wrong = self.lost = self.hostile = 0
        self.lost_why: list[str] = []

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def _honest(url: str, k: int, stop: float, t: Tally) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        i = k
        while time.monotonic() < stop:
            i += 1
            right = i % 2 == 0
            if i % 3:
                body = {"code": (RIGHT if right else WRONG) + "\nassert f(1, 2) == 3\nprint('ok')", "run_timeout": 5}
                path = "/run_code"
            else:
                body = {"tasks": [TASK], "completions": [{"task_id": "add", "completion": RIGHT if right else WRONG,
                                                          "sample_id": i}]}
                path = "/verify"
            for _ in range(60):  # overload is answered 429/503 + Retry-After: the client comes back
                try:
                    r = c.post(path, json=body)
                except httpx.HTTPError as e:
                    t.add(lost=1)
                    t.lost_why.append(type(e).__name__)
                    break
                if r.status_code in (429, 503):
                    time.sleep(float(r.headers.get("retry-after", "1")))
                    continue
                if r.status_code != 200:
                    t.add(lost=1)
                    t.lost_why.append(f"{r.status_code} {r.text[:100]}")
                    break
                d = r.json()
                got = d["status"] == "Success" if path == "/run_code" else d["verdicts"][0]["passed"]
                t.add(answered=1, wrong=int(got != right))
                break


def _hostile(url: str, k: int, stop: float, t: Tally) -> None:
    u = urlparse(url)
    i = k
    while time.monotonic() < stop:
        i += 1
        kind = i % 6
        try:
            if kind == 0:  # an endless program, abandoned
                httpx.post(url + "/run_code", json={"code": "while True:\n    pass", "run_timeout": 5}, timeout=0.5)
            elif kind == 1:  # lone surrogates in the program's error
                httpx.post(url + "/verify", content=json.dumps({"tasks": [TASK], "completions": [
                    {"task_id": "add", "completion": "def f(a, b):\n    raise ValueError('\\udc80')"}]}), timeout=30)
            elif kind == 2:  # crafted JSON
                httpx.post(url + "/run_code", content=b"[" * 50_000 + b"]" * 50_000, timeout=30)
                httpx.post(url + "/run_code", content=b'{"code": "print(1)", "stdin": "\\ud800", "run_timeout": '
                                                      + b"7" * 5000 + b"}", timeout=30)
            elif kind == 3:  # a half-open connection
                s = socket.create_connection((u.hostname, u.port), timeout=10)
                s.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\n")
                time.sleep(0.5)
                s.close()
            elif kind == 4:  # a stalled body
                s = socket.create_connection((u.hostname, u.port), timeout=10)
                s.sendall(b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"tasks\": ")
                time.sleep(0.5)
                s.close()
            else:  # a 1 TiB memory limit and a 1e300 s timeout, clamped
                httpx.post(url + "/run_code", json={"code": "print(1)", "memory_limit_MB": 1 << 20,
                                                    "run_timeout": 1e300}, timeout=30)
        except (httpx.HTTPError, OSError):
            pass
        t.add(hostile=1)


@pytest.mark.slow
def test_a_minute_of_honest_and_hostile_clients_loses_and_misjudges_nothing():
    with served("--workers", "2", "--max-pending", "32", "--header-timeout", "2", "--body-timeout", "2",
                "--max-run-timeout", "5", "--queue-timeout", "30") as (url, proc):
        t = Tally()
        stop = time.monotonic() + SOAK_S
        threads = [threading.Thread(target=_honest, args=(url, k, stop, t)) for k in range(12)]
        threads += [threading.Thread(target=_hostile, args=(url, k, stop, t)) for k in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        m = httpx.get(url + "/metrics", timeout=30).json()
        assert proc.poll() is None
        log = server_log(proc)
    assert "Traceback" not in log, log[-3000:]
    assert t.lost == 0, t.lost_why[:5]
    assert t.wrong == 0 and t.answered > 50 and t.hostile > 50
    assert "500" not in m["responses"]
