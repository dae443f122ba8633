"""A completion's total time is bounded by default; `codechat verify --total-timeout-s / --stop-at-first-failure`."""
import json
import time

from codechat.cli import main
from codechat.config import VerifierConfig
from codechat.sandbox import RunResult
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.stdio import StdioRun

LOOP = "while True:\n    pass\n"


def stdio_task(n: int, timeout_s: float | None = None) -> Task:
    return Task("many", "print 1", [], timeout_s=timeout_s, stdio=StdioSpec([IOTest("", "1\n")] * n))


def test_a_looping_program_on_201_tests_is_stopped_by_the_default_total_limit():
    # every test hits its 5 s limit: unbounded, that is 201 x 5 s ~ 17 minutes for one sample
    run = StdioRun(stdio_task(201), LOOP, VerifierConfig())
    started = 0
    for job in run.jobs():
        if job is None:
            run.add(None)
            continue
        started += 1
        run.add(RunResult("timeout", None, "time limit reached", duration_s=5.0))
    verdict = run.verdict()
    limit = VerifierConfig().total_timeout_s
    assert 0 < limit <= 120 and started <= limit / 5 + 1, (limit, started)
    assert verdict.status == "timeout" and verdict.tests_passed == 0 and verdict.duration_s <= limit + 5


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def cli(tmp_path, *flags) -> tuple[dict, float]:
    tasks = write(tmp_path / "t.jsonl", [{"task_id": "many", "prompt": "print 1", "kind": "stdio", "timeout_s": 0.5,
                                          "tests": [{"input": "", "output": "1\n"}] * 20}])
    comps = write(tmp_path / "c.jsonl", [{"task_id": "many", "completion": LOOP}])
    out = tmp_path / "r.jsonl"
    t0 = time.monotonic()
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out), "--quiet",
                 "--workers", "2", *flags]) == 0
    return json.loads(out.read_text()), time.monotonic() - t0


def test_verify_cli_total_timeout_bounds_a_looping_sample(tmp_path):
    row, took = cli(tmp_path, "--total-timeout-s", "1")
    assert row["status"] == "timeout" and row["duration_s"] < 2.5, row
    assert took < 6, took  # 20 tests x 0.5 s would be 10 s of program time


def test_verify_cli_stop_at_first_failure(tmp_path):
    row, took = cli(tmp_path, "--stop-at-first-failure", "--total-timeout-s", "0")
    assert row["status"] == "timeout" and row["message"].startswith("test 0:") and row["tests_passed"] == 0, row
    assert took < 6, took


def test_verify_cli_rejects_a_negative_total_timeout(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", [{"task_id": "x", "prompt": "p", "kind": "stdio",
                                          "tests": [{"input": "", "output": "1\n"}]}])
    comps = write(tmp_path / "c.jsonl", [{"task_id": "x", "completion": "print(1)"}])
    rc = main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(tmp_path / "r.jsonl"),
               "--quiet", "--total-timeout-s", "-1"])
    assert rc != 0 and "--total-timeout-s must be >= 0" in capsys.readouterr().err
