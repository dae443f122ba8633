"""Work never outlives its client: when a client disconnects (its own timeout), its sandbox runs are killed and
its worker freed at once, and a request not started within `--queue-timeout` of its arrival gets 503 and never
runs. The honest twin in each test is the next, normal client: served promptly."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from codechat.integrations.trl import CodechatReward
from serve_helpers import served

LOOP = "while True:\n    pass"


def _abandon(url: str, path: str, body: dict, out: list) -> None:
    try:
        httpx.post(url + path, json=body, timeout=1.0)
        out.append("answered")
    except httpx.TimeoutException:
        out.append("timed out")


def _burst(url: str, path: str, body: dict, n: int) -> list:
    out: list = []
    ts = [threading.Thread(target=_abandon, args=(url, path, body, out)) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@pytest.fixture(scope="module")
def url():
    with served("--workers", "2", "--max-run-timeout", "30", "--max-task-timeout", "30") as s:
        yield s[0]


def test_endless_programs_whose_clients_left_free_their_workers(url):
    out = _burst(url, "/run_code", {"code": LOOP, "run_timeout": 30}, 12)
    assert out == ["timed out"] * 12
    t0 = time.monotonic()
    r = httpx.post(url + "/run_code", json={"code": "print(6 * 7)"}, timeout=20)
    assert r.json()["run_result"]["stdout"] == "42\n" and time.monotonic() - t0 < 10
    m = httpx.get(url + "/metrics", timeout=10).json()
    assert m["responses"].get("499", 0) >= 1 and m["queue_depth"] == 0


def test_an_abandoned_batch_of_endless_programs_frees_the_workers(url):
    task = {"task_id": "f", "prompt": "", "entry_point": "f", "tests": ["assert f(1) == 1"], "timeout_s": 30}
    loops = {"tasks": [task], "completions": [{"task_id": "f", "completion": f"def f(x):\n    while {i + 1}:\n"
                                                                             f"        pass"} for i in range(8)]}
    assert _burst(url, "/verify", loops, 3) == ["timed out"] * 3
    t0 = time.monotonic()
    r = httpx.post(url + "/verify", json={"tasks": [task], "completions": [
        {"task_id": "f", "completion": "def f(x):\n    return x"}]}, timeout=20)
    assert r.json()["verdicts"][0]["status"] == "passed" and time.monotonic() - t0 < 10


def test_a_request_not_started_by_its_queue_deadline_is_503_and_never_runs():
    with served("--workers", "1", "--queue-timeout", "1") as (url, _):
        first: list = []
        t = threading.Thread(target=lambda: first.append(httpx.post(
            url + "/run_code", json={"code": "import time\ntime.sleep(4)\nprint('slept')"}, timeout=30)))
        t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        r = httpx.post(url + "/run_code", json={"code": "print('queued')"}, timeout=30)
        assert r.status_code == 503 and "Retry-After" in r.headers and time.monotonic() - t0 < 3
        t.join()
        assert first[0].json()["run_result"]["stdout"] == "slept\n"
        m = httpx.get(url + "/metrics", timeout=10).json()
        assert m["programs"] == 1  # the expired request never ran
        assert httpx.post(url + "/run_code", json={"code": "print(1)"}, timeout=30).json()["status"] == "Success"


def test_the_trl_reward_comes_back_after_a_503_instead_of_failing_the_step():
    with served("--workers", "1", "--queue-timeout", "1") as (url, _):
        busy = threading.Thread(target=lambda: httpx.post(
            url + "/run_code", json={"code": "import time\ntime.sleep(3)"}, timeout=30))
        busy.start()
        time.sleep(0.5)
        task = {"task_id": "f", "prompt": "", "entry_point": "f", "tests": ["assert f(1) == 1"]}
        reward = CodechatReward(column="task", url=url)
        got = reward(prompts=["p", "p"], completions=["def f(x):\n    return x", "def f(x):\n    return 0"],
                     task=[task, task])
        busy.join()
        assert got == [1.0, 0.0]
        m = httpx.get(url + "/metrics", timeout=10).json()
        assert m["responses"].get("503", 0) >= 1  # it was refused first, then came back
