"""Clients written for SandboxFusion and verl work unchanged: a request built with SandboxFusion's defaults
(`memory_limit_MB: -1`, `stdin: null`), its `files` (base64, written beside the program), verl's
SandboxFusion-client contract (plain HTTP: which response verl reads as right, wrong, runtime error, timeout,
error), verl's APPS ground truths answered with LeetCode's `class Solution`, and a `datasets` column that mixes
codechat and MBPP task dicts (Arrow fills each row's missing keys with None). Each with a wrong twin."""
from __future__ import annotations

import base64
import json

import httpx
import pytest

from codechat.integrations.trl import CodechatReward
from codechat.integrations.verl import compute_score
from serve_helpers import served


@pytest.fixture(scope="module")
def url():
    with served("--workers", "2", "--memory-mb", "512") as s:
        yield s[0]


def sandboxfusion_request(code: str, **kw) -> dict:
    """A /run_code body as SandboxFusion's RunCodeRequest fills it when the caller sets only the code."""
    return {"code": code, "language": "python", "compile_timeout": 10, "run_timeout": 10, "memory_limit_MB": -1,
            "stdin": None, "files": {}, "fetch_files": [], **kw}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_request_with_sandboxfusions_defaults_runs(url):
    r = httpx.post(url + "/run_code", json=sandboxfusion_request("print('hi')"), timeout=60).json()
    assert r["status"] == "Success" and r["run_result"]["stdout"] == "hi\n"


def test_files_are_written_beside_the_program(url):
    code = "print(open('data/in.txt').read().upper(), open('b.bin', 'rb').read())"
    files = {"data/in.txt": b64("hello"), "b.bin": base64.b64encode(b"\x00\xff").decode()}
    r = httpx.post(url + "/run_code", json=sandboxfusion_request(code, files=files), timeout=60).json()
    assert r["status"] == "Success" and r["run_result"]["stdout"] == "HELLO b'\\x00\\xff'\n"
    missing = httpx.post(url + "/run_code", json=sandboxfusion_request(code, files={"b.bin": b64("x")}),
                         timeout=60).json()  # the wrong twin: a file the request did not send is not there
    assert missing["status"] == "Failed" and "FileNotFoundError" in missing["run_result"]["stderr"]


def verl_outcome(url: str, code: str, stdin: str, expected: str, **kw):
    """verl's SandboxFusion client, reduced to its contract: POST the request, then its reading of the answer
    (True / False for right / wrong output, -1 error, -2 runtime error, -3 timeout, -4 compile error)."""
    body = {"code": code, "stdin": stdin, "compile_timeout": 10, "run_timeout": 5, "memory_limit_MB": 1024,
            "language": "python", **kw}
    r = httpx.post(url + "/run_code", json=body, timeout=60)
    if r.status_code != 200:
        return -1
    resp = r.json()
    if resp["status"] == "SandboxError":
        return -1
    cr, rr = resp.get("compile_result"), resp.get("run_result")
    if resp["status"] == "Failed":
        if cr and cr["status"] == "Finished" and cr["return_code"] != 0:
            return -4
        if rr["status"] == "TimeLimitExceeded":
            return -3
        if rr["status"] == "Error" or rr["return_code"] != 0:
            return -2
        return -1
    return rr["stdout"].rstrip("\n") == expected.rstrip("\n")


@pytest.mark.parametrize("code,want", [
    ("print(sum(map(int, input().split())))", True),
    ("print(0)", False),
    ("print(1 / 0)", -2),
    ("while True:\n    pass", -3),
    ("x = bytearray(900 << 20)", -2),
    ("def f(:\n    pass", -2),
])
def test_verls_sandboxfusion_client_reads_each_outcome_as_sandboxfusion_gives_it(url, code, want):
    assert verl_outcome(url, code, "2 3\n", "5", run_timeout=2) == want


def test_verls_client_reads_an_unsupported_language_as_an_error(url):
    assert verl_outcome(url, "int main() {}", "", "", language="cpp") == -1


CALL_GT = {"inputs": [[[1, 2, 3]], [[5]]], "outputs": [6, 5], "fn_name": "total"}


@pytest.mark.parametrize("answer,score", [
    ("class Solution:\n    def total(self, nums):\n        return sum(nums)", 1.0),
    ("class Solution:\n    def total(self, nums):\n        return max(nums)", 0.0),  # the wrong twin
    ("def total(nums):\n    return sum(nums)", 1.0),
])
def test_an_apps_call_based_answer_may_be_a_solution_class(url, answer, score):
    got = compute_score("apps", f"```python\n{answer}\n```", CALL_GT, url=url)
    assert got["score"] == score and got["status"] in ("passed", "failed")


def test_real_apps_solution_class_references_pass_as_verl_ground_truth(url, shared_data):
    folder = shared_data / "stdio" / "apps" / "2404"  # a LeetCode-style APPS task: its references are classes
    gt = json.loads((folder / "input_output.json").read_text())  # verl's ground truth: no starter code
    refs = json.loads((folder / "solutions.json").read_text())[:3]
    assert all(compute_score("apps", f"```python\n{r}\n```", gt, url=url)["score"] == 1.0 for r in refs)
    assert compute_score("apps", "```python\nclass Solution:\n    pass\n```", gt, url=url)["score"] == 0.0


def test_a_datasets_column_mixing_codechat_and_mbpp_rows_reads_each_by_its_fields(url, shared_data):
    datasets = pytest.importorskip("datasets")
    mbpp = json.loads((shared_data / "mbpp" / "mbpp.jsonl").read_text().splitlines()[1])
    add = {"task_id": 9001, "prompt": "def add(a, b):", "entry_point": "add", "tests": ["assert add(1, 2) == 3"]}
    column = datasets.Dataset.from_list([{"task": add}, {"task": mbpp}])["task"]  # (ids: one Arrow type)
    assert column[0]["test_list"] is None and column[1]["tests"] is None  # what Arrow made of the two shapes
    reward = CodechatReward(column="task", url=url)
    honest = reward(prompts=["p", "p"], completions=["def add(a, b):\n    return a + b", mbpp["code"]],
                    task=column)
    wrong = reward(prompts=["p", "p"], completions=["def add(a, b):\n    return a - b", "x = 1"], task=column)
    assert honest == [1.0, 1.0] and wrong == [0.0, 0.0]
