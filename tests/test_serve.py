"""`codechat serve` driven over HTTP: SandboxFusion's /run_code contract case by case (read the way verl's
client reads it), /verify against in-process verdicts, auth, size limits, overload, a killed worker, shutdown."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from codechat.config import VerifierConfig
from codechat.tasks.loaders import tasks_from_records
from codechat.verifier.verify import Verifier
from serve_helpers import ROOT, served, zygote_pids

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tasks = tmp_path_factory.mktemp("served") / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "neg", "prompt": "", "entry_point": "neg",
                                 "tests": ["assert neg(2) == -2"]}) + "\n")
    with served("--workers", "2", "--token", TOKEN, "--max-body-mb", "0.05", "--max-batch", "12",
                "--tasks", str(tasks)) as s:
        yield s


def run_code(url, code, stdin="", headers=AUTH, **kw):
    body = {"code": code, "stdin": stdin, "language": "python", "run_timeout": 5, "compile_timeout": 10,
            "memory_limit_MB": 512, "files": {}, "fetch_files": [], **kw}
    r = httpx.post(url + "/run_code", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def verl_reads(resp: dict, expected: str):
    """What verl's sandbox_fusion client concludes from one response (its _process_single_case rules)."""
    if resp["status"] == "SandboxError":
        return "sandbox_error"
    rr = resp["run_result"]
    if resp["status"] == "Failed":
        if rr["status"] == "TimeLimitExceeded":
            return "timeout"
        if rr["status"] == "Error" or (rr["status"] == "Finished" and rr["return_code"] != 0):
            return "runtime_error"
        return "unknown"
    return rr["status"] == "Finished" and rr["stdout"].strip() == expected.strip()


ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_right_answer_is_success_with_its_stdout(server):
    resp = run_code(server[0], ADD, "2 3\n")
    assert resp["status"] == "Success" and resp["compile_result"] is None
    assert resp["run_result"]["return_code"] == 0 and resp["run_result"]["stdout"] == "5\n"
    assert verl_reads(resp, "5") is True


def test_wrong_answer_is_success_with_other_stdout(server):
    resp = run_code(server[0], ADD.replace("a + b", "a - b"), "2 3\n")
    assert resp["status"] == "Success" and verl_reads(resp, "5") is False


def test_runtime_error_is_failed_with_nonzero_exit_and_stderr(server):
    resp = run_code(server[0], "raise ValueError('boom')")
    assert resp["status"] == "Failed" and resp["run_result"]["status"] == "Finished"
    assert resp["run_result"]["return_code"] == 1 and "ValueError: boom" in resp["run_result"]["stderr"]
    assert verl_reads(resp, "") == "runtime_error"


def test_exit_code_is_the_programs(server):
    resp = run_code(server[0], "print('x')\nexit(3)")
    assert resp["run_result"]["return_code"] == 3 and resp["run_result"]["stdout"] == "x\n"


def test_timeout_is_time_limit_exceeded(server):
    t0 = time.monotonic()
    resp = run_code(server[0], "while True: pass", run_timeout=1)
    assert resp["status"] == "Failed" and resp["run_result"]["status"] == "TimeLimitExceeded"
    assert verl_reads(resp, "") == "timeout" and time.monotonic() - t0 < 10


def test_memory_limit_is_a_runtime_error(server):
    resp = run_code(server[0], "x = bytearray(400 << 20)\nprint('allocated')", memory_limit_MB=128)
    assert resp["status"] == "Failed" and "MemoryError" in resp["run_result"]["stderr"]
    assert verl_reads(resp, "allocated") == "runtime_error"
    assert run_code(server[0], "x = bytearray(50 << 20)\nprint('ok')", memory_limit_MB=512)["status"] == "Success"


def test_syntax_error_is_a_failed_run_like_python(server):
    resp = run_code(server[0], "def f(:\n  pass")
    assert resp["status"] == "Failed" and resp["run_result"]["return_code"] == 1
    assert "SyntaxError" in resp["run_result"]["stderr"]


@pytest.mark.parametrize("field,value,words", [("language", "cpp", "language 'cpp' is not supported"),
                                               ("fetch_files", ["a.txt"], "fetch_files are not supported")])
def test_unsupported_request_is_sandbox_error_saying_why(server, field, value, words):
    resp = run_code(server[0], "print(1)", **{field: value})
    assert resp["status"] == "SandboxError" and words in resp["message"]
    assert verl_reads(resp, "1") == "sandbox_error"


TASKS = [
    {"task_id": "add", "prompt": "def add(a, b):", "entry_point": "add",
     "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]},
    {"problem_id": "echo2", "question": "Print the number doubled.",
     "input_output": '{"inputs": ["2\\n", "5\\n"], "outputs": ["4\\n", "10\\n"]}'},
]
COMPLETIONS = [
    ("add", "```python\ndef add(a, b):\n    return a + b\n```"),
    ("add", "def add(a, b):\n    return a * b if a > 0 else a + b"),  # partial credit: 2 of 3
    ("add", "def add(a, b):\n    return a + b"),
    ("add", "def add(a, b):\n    return a + b"),  # a copy: judged once, same verdict
    ("add", "def add(a, b:\n  return 0"),
    ("add", "no code here, sorry"),
    ("echo2", "print(int(input()) * 2)"),
    ("echo2", "print(4)"),
    ("echo2", "import sys\nsys.exit(2)"),
]


def _comparable(v: dict) -> dict:
    return {k: x for k, x in v.items() if k not in ("duration_s", "cpu_s", "task_id", "sample_id")}


def test_verify_batch_matches_in_process_verdicts(server):
    body = {"tasks": TASKS, "completions": [{"task_id": t, "completion": c, "sample_id": i}
                                            for i, (t, c) in enumerate(COMPLETIONS)]}
    r = httpx.post(server[0] + "/verify", json=body, headers=AUTH, timeout=120)
    assert r.status_code == 200, r.text
    got = r.json()["verdicts"]
    tasks = {t.task_id: t for t in tasks_from_records(TASKS)}
    with Verifier(VerifierConfig(workers=1)) as v:
        want = v.verify_many([(tasks[t], c) for t, c in COMPLETIONS])
    assert [g["sample_id"] for g in got] == list(range(len(COMPLETIONS)))
    assert [_comparable(g) for g in got] == [_comparable(w.to_dict()) for w in want]
    assert [g["status"] for g in got][:2] == ["passed", "failed"] and got[1]["tests_passed"] == 2
    assert r.json()["stats"]["verify/dedup_frac"] > 0


def test_verify_names_tasks_of_the_set_loaded_at_start(server):
    body = {"completions": [{"task_id": "neg", "completion": "def neg(x):\n    return -x"},
                            {"task_id": "neg", "completion": "def neg(x):\n    return x"}]}
    r = httpx.post(server[0] + "/verify", json=body, headers=AUTH, timeout=60)
    assert [v["status"] for v in r.json()["verdicts"]] == ["passed", "failed"]


def test_verify_names_the_bad_input(server):
    r = httpx.post(server[0] + "/verify", json={"tasks": TASKS, "completions": [{"task_id": "nope", "completion": ""}]},
                   headers=AUTH, timeout=30)
    assert r.status_code == 400 and "unknown task_id 'nope'" in r.json()["error"]
    r = httpx.post(server[0] + "/verify", json={"tasks": [{"what": 1}], "completions": []}, headers=AUTH, timeout=30)
    assert r.status_code == 400 and "unknown format" in r.json()["error"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}])
def test_missing_or_wrong_token_is_refused(server, headers):
    r = httpx.post(server[0] + "/run_code", json={"code": "print(1)"}, headers=headers, timeout=30)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(server[0] + "/metrics", headers=headers, timeout=30).status_code == 401
    assert httpx.get(server[0] + "/health", timeout=30).status_code == 200  # health needs no token


def test_oversized_request_is_413(server):
    r = httpx.post(server[0] + "/run_code", json={"code": "#" * 100_000}, headers=AUTH, timeout=30)
    assert r.status_code == 413 and "limit" in r.json()["error"]
    assert run_code(server[0], "print(1)")["status"] == "Success"


def test_a_batch_over_max_batch_is_413(server):
    body = {"completions": [{"task_id": "neg", "completion": "x"}] * 13}
    r = httpx.post(server[0] + "/verify", json=body, headers=AUTH, timeout=30)
    assert r.status_code == 413 and "13 completions is over the limit of 12" in r.json()["error"]


def test_metrics_count_requests_statuses_and_latency(server):
    run_code(server[0], "print(1)")
    m = httpx.get(server[0] + "/metrics", headers=AUTH, timeout=30).json()
    assert m["requests"]["/run_code"] >= 1 and m["statuses"]["Finished"] >= 1 and m["programs"] >= 1
    assert 0 < m["latency_s"]["/run_code"]["p50"] <= m["latency_s"]["/run_code"]["p99"]
    assert m["queue_depth"] == 0 and m["responses"]["401"] >= 1


def test_beyond_localhost_without_token_refuses_to_start():
    p = subprocess.run([sys.executable, "-m", "codechat", "serve", "--host", "0.0.0.0", "--port", "0"], cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "--token" in p.stderr


def _slow(url, out, code="import time\ntime.sleep(1.5)\nprint('done')"):
    try:
        out.append(httpx.post(url + "/run_code", json={"code": code, "run_timeout": 10}, timeout=60))
    except httpx.HTTPError as e:
        out.append(e)


def test_overload_is_429_with_retry_after_then_a_killed_worker_is_sandbox_error():
    with served("--workers", "1", "--max-pending", "1") as (url, proc):
        out: list = []
        t = threading.Thread(target=_slow, args=(url, out))
        t.start()
        time.sleep(0.5)
        r = httpx.post(url + "/run_code", json={"code": "print(1)"}, timeout=30)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        t.join()
        assert out[0].json()["run_result"]["stdout"] == "done\n"
        # a worker killed mid-request: that request gets SandboxError (infra), the server keeps serving
        out.clear()
        t = threading.Thread(target=_slow, args=(url, out, "import time\ntime.sleep(5)\nprint('done')"))
        t.start()
        time.sleep(1.0)
        pids = zygote_pids(proc.pid)
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        t.join()
        assert out[0].json()["status"] == "SandboxError"
        after = httpx.post(url + "/run_code", json={"code": "print(7)"}, timeout=60).json()
        assert after["status"] == "Success" and after["run_result"]["stdout"] == "7\n"


def test_sigterm_finishes_in_flight_work_then_exits():
    with served("--workers", "1") as (url, proc):
        out: list = []
        t = threading.Thread(target=_slow, args=(url, out))
        t.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        t.join()
        assert proc.wait(timeout=30) == 0
        assert out[0].json()["run_result"]["stdout"] == "done\n"
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=5)
