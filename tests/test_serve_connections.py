"""Connections cannot starve the server: half-open and trickling connections are closed at the header timeout,
a stalled body gets 408 at the body timeout, the token and admission are checked before any of the body is read,
the connection cap answers 503 instead of hanging, and crafted JSON gets 400 naming what is wrong (never 500).
Each attack has an honest twin: the next well-behaved client is served."""
from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest

from serve_helpers import server_log, served

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server():
    with served("--workers", "1", "--token", TOKEN, "--header-timeout", "1", "--body-timeout", "1",
                "--max-connections", "16", "--max-pending", "2") as s:
        yield s


@pytest.fixture(scope="module")
def url(server):
    return server[0]


def _connect(url) -> socket.socket:
    u = urlparse(url)
    return socket.create_connection((u.hostname, u.port), timeout=10)


def _honest(url) -> httpx.Response:
    return httpx.post(url + "/run_code", json={"code": "print(6 * 7)"}, headers=AUTH, timeout=30)


def _closed_by_server(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except (socket.timeout, TimeoutError):
        return False
    except OSError:
        return True


def test_half_open_and_trickling_connections_are_closed_and_the_next_client_is_served(url):
    socks = [_connect(url) for _ in range(40)]
    for i, s in enumerate(socks):
        s.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\n" if i % 2 else b"")
    stop = threading.Event()

    def trickle():  # a slowloris: one header byte every 0.2 s, never finishing the head
        while not stop.wait(0.2):
            for s in socks[1::2]:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass

    t = threading.Thread(target=trickle)
    t.start()
    try:
        assert all(_closed_by_server(s, 5) for s in socks)
    finally:
        stop.set()
        t.join()
    t0 = time.monotonic()
    r = _honest(url)
    assert r.status_code == 200 and r.json()["run_result"]["stdout"] == "42\n" and time.monotonic() - t0 < 10


def test_over_the_connection_cap_a_request_is_answered_503_not_left_hanging(url):
    socks = [_connect(url) for _ in range(20)]
    time.sleep(0.2)
    try:
        r = _honest(url)
        assert r.status_code == 503
    finally:
        for s in socks:
            s.close()
    time.sleep(0.3)
    assert _honest(url).status_code == 200


def _head(path: str, length: int, token: str = TOKEN) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _status(s: socket.socket, within_s: float) -> int:
    s.settimeout(within_s)
    line = s.recv(4096).split(b"\r\n", 1)[0]
    return int(line.split()[1])


def test_a_stalled_body_is_408_at_the_body_timeout(url):
    s = _connect(url)
    s.sendall(_head("/run_code", 1000) + b'{"code": "pr')
    t0 = time.monotonic()
    assert _status(s, 10) == 408 and time.monotonic() - t0 < 5
    s.close()
    assert _honest(url).status_code == 200


def test_the_token_is_checked_before_the_body_is_read(url):
    s = _connect(url)
    s.sendall(_head("/run_code", 10 << 20, token="wrong"))
    assert _status(s, 5) == 401
    s.close()


def test_admission_is_checked_before_the_body_is_read(url):
    held = [_connect(url) for _ in range(2)]  # two admitted requests whose bodies never finish (max-pending 2)
    for s in held:
        s.sendall(_head("/run_code", 1000))
    time.sleep(0.3)
    s = _connect(url)
    s.sendall(_head("/run_code", 10 << 20))  # no body at all: refused on its headers
    assert _status(s, 5) == 429
    for h in held + [s]:
        h.close()
    time.sleep(1.5)
    assert _honest(url).status_code == 200


@pytest.mark.parametrize("body,words", [
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
    (b'{"code": "print(1)", "run_timeout": ' + b"9" * 5000 + b"}", "5000 digits"),
    (b'{"code": "print(1)", "stdin": "\\ud800"}', "stdin"),
    (b'{"code": "print(1)", "run_timeout": NaN}', "NaN"),
    (b'{"code": "print(1)", "run_timeout": 1e400}', "out of range"),
    (b'{"code": "pri\xff"}', "not UTF-8"),
])
def test_crafted_json_is_400_saying_what_is_wrong(url, body, words):
    r = httpx.post(url + "/run_code", content=body, headers={**AUTH, "Content-Type": "application/json"},
                   timeout=30)
    assert r.status_code == 400 and words in r.json()["error"]


def test_a_deeply_nested_task_record_is_400_naming_tasks(url):
    deep = {"task_id": "d", "prompt": "", "tests": ["assert True"], "metadata": {}}
    node = deep["metadata"]
    for _ in range(150):
        node["x"] = {}
        node = node["x"]
    r = httpx.post(url + "/verify", json={"tasks": [deep], "completions": [{"task_id": "d", "completion": "x=1"}]},
                   headers=AUTH, timeout=30)
    assert r.status_code == 400 and "tasks" in r.json()["error"]
    assert _honest(url).status_code == 200


def test_an_oversized_head_is_refused_and_closed(url):
    s = _connect(url)
    s.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (32 << 10))  # still no end of head
    assert _status(s, 5) == 400 and _closed_by_server(s, 5)
    s.close()
    assert _honest(url).status_code == 200


def test_a_client_leaving_mid_body_is_dropped_quietly(server):
    url, proc = server
    s = _connect(url)
    s.sendall(_head("/run_code", 1000) + b'{"code": ')
    time.sleep(0.2)
    s.close()
    time.sleep(0.5)
    assert _honest(url).status_code == 200
    assert "Traceback" not in server_log(proc)  # no request of this module made the server fail
