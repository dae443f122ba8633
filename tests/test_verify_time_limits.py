"""Time limits per test and in total for function tasks (verifier.test_timeout_s, cpu_time_limit).
An infinite loop in one test fails that test with a clear reason; the tests around it still count; the batch
goes on."""
import json

import pytest

from codechat.cli import main
from codechat.config import VerifierConfig
from codechat.config.io import ConfigError, load_config
from codechat.tasks import Task
from codechat.verifier.verify import Verifier
from test_verify_protocol import frame, run_judge

LOOPS_ON_ZERO = Task("loop", "", ["assert f(1) == 2", "assert f(0) == 1", "assert f(3) == 4", "assert f(-1) == 0"], "f")
LOOP = "def f(x):\n    while x == 0:\n        pass\n    return x + 1\n"
HONEST = "def f(x):\n    return x + 1\n"


@pytest.fixture(scope="module", params=[False, True], ids=["wall", "cpu"])
def verifier(request):
    with Verifier(VerifierConfig(workers=2, timeout_s=6.0, test_timeout_s=0.5, cpu_time_limit=request.param)) as v:
        yield v


def test_an_infinite_loop_fails_only_its_test_and_the_batch_goes_on(verifier):
    looping, honest = verifier.verify_many([(LOOPS_ON_ZERO, LOOP), (LOOPS_ON_ZERO, HONEST)])
    kind = "CPU" if verifier.cfg.cpu_time_limit else "wall-clock"
    assert looping.status == "timeout" and looping.tests_passed == 3 and looping.tests_total == 4, looping
    assert looping.message == f"test 1: over the 0.5 s per-test {kind} limit", looping
    assert honest.passed, honest
    if verifier.cfg.cpu_time_limit:  # the verdict records the CPU time the judge measured, beside the wall time
        assert 0.3 < looping.cpu_s < 1.5 and looping.duration_s >= looping.cpu_s * 0.5, looping


def test_a_program_that_disables_its_timer_fails_that_test_and_is_ended(verifier):
    evasive = ("import _signal\ndef f(x):\n    _signal.setitimer(_signal.ITIMER_REAL, 0)\n"
               "    _signal.setitimer(_signal.ITIMER_PROF, 0)\n    while x == 0:\n        pass\n    return x + 1\n")
    v, honest = verifier.verify_many([(LOOPS_ON_ZERO, evasive), (LOOPS_ON_ZERO, HONEST)])
    assert v.status == "timeout" and v.tests_passed == 1, v  # the backstop: tests after the stuck one do not run
    assert v.duration_s < 8.0, v  # the backstop, well before the supervisor's deadline on CPU time (32 s)
    assert honest.passed, honest


def test_the_total_limit_leaves_the_remaining_tests_not_passed():
    burn = "import time\ndef f(x):\n    t = time.process_time()\n    while time.process_time() - t < 0.4:\n        pass\n    return x\n"
    task = Task("tot", "", [f"assert f({i}) == {i}" for i in range(5)], "f", timeout_s=1.0)
    with Verifier(VerifierConfig(workers=1, cpu_time_limit=True)) as v:
        verdict = v.verify(task, burn)
    assert verdict.status == "timeout" and verdict.tests_passed == 2, verdict


def test_cpu_time_limit_ignores_time_spent_off_cpu():
    sleepy = Task("sl", "", ["assert nap(1) == 1", "assert nap(2) == 2"], "nap")
    code = "import time\ndef nap(x):\n    time.sleep(0.6)\n    return x\n"
    with Verifier(VerifierConfig(workers=1, test_timeout_s=0.3, cpu_time_limit=True)) as cpu, \
            Verifier(VerifierConfig(workers=1, test_timeout_s=0.3)) as wall:
        assert cpu.verify(sleepy, code).passed
        on_wall = wall.verify(sleepy, code)
    assert on_wall.status == "timeout" and on_wall.tests_passed == 0, on_wall


def test_a_forged_time_reply_only_fails_the_program():
    rec = run_judge({"tests": ["assert f(1) == 1", "assert f(2) == 2"]},
                    [frame(["loaded", [["f", "object", "function"]]]), frame(["time"]), frame(["ok", 2])])
    assert rec["status"] == "timeout" and rec["tests_passed"] == 1, rec


def test_test_timeout_must_not_be_negative(tmp_path):
    with pytest.raises(ConfigError, match=r"verifier\.test_timeout_s: expected >= 0"):
        load_config(None, ["verifier.test_timeout_s=-1"])


def test_verify_cli_test_timeout(tmp_path):
    tasks, comps, out = tmp_path / "t.jsonl", tmp_path / "c.jsonl", tmp_path / "o.jsonl"
    tasks.write_text(json.dumps({"task_id": "loop", "prompt": "", "entry_point": "f", "tests": LOOPS_ON_ZERO.tests}) + "\n")
    comps.write_text(json.dumps({"task_id": "loop", "completion": LOOP}) + "\n")
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out), "--workers", "1",
                 "--test-timeout", "0.5", "--quiet"]) == 0
    row = json.loads(out.read_text())
    assert row["status"] == "timeout" and row["tests_passed"] == 3, row
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out),
                 "--test-timeout", "-2", "--quiet"]) == 2


def test_a_loop_while_loading_is_a_timeout_on_cpu_time():
    task = Task("imp", "", ["assert f(1) == 2"], "f", timeout_s=0.5)
    with Verifier(VerifierConfig(workers=1, cpu_time_limit=True)) as v:
        looping, honest = v.verify_many([(task, "while True:\n    pass\n"), (task, HONEST)])
    assert looping.status == "timeout", looping  # the soft CPU limit or the wall-clock backstop, never `error`
    assert honest.passed, honest
