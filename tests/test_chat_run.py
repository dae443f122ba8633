"""`codechat chat` /run: the last code block of the last answer runs in the sandbox; one attack per test, on planted
answers (chat_helpers.py)."""
from __future__ import annotations

import os

from chat_helpers import fence, one_thread, planted, policy, sandbox_session  # noqa: F401 - fixtures


# --- /run: the last code block of the last answer, in the sandbox; one attack per test ------------------------------
def test_run_shows_stdout_stderr_status_and_time(planted):
    s = planted("First:\n```python\nprint('old')\n```\n" + fence(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)\nif __name__ == '__main__':\n    print('main')"))
    r = s.run_last()
    assert (r.status, r.stdout, r.stderr, r.exit_code) == ("ok", "out\nmain\n", "err\n", 0)
    text = s.handle("/run")
    assert "--- stdout\nout\nmain" in text and "--- stderr\nerr" in text and "--- status: ok" in text
    assert "--- time: " in text


def test_run_reports_exceptions_and_exit_codes(planted):
    r = planted(fence("def f():\n    return 1 / 0\nf()")).run_last()
    assert r.status == "error" and r.error_type == "ZeroDivisionError" and 'line 2, in f' in r.stderr
    assert planted(fence("import sys\nsys.exit(3)")).run_last().exit_code == 3
    assert planted("Nothing:\n```python\n```").run_last().status == "no_code"


def test_run_contains_killing_the_chat_process(planted):
    pid = os.getpid()
    r = planted(fence(f"import os, signal\nos.kill({pid}, signal.SIGKILL)\nos.kill(os.getppid(), 9)")).run_last()
    # ProcessLookupError: in its PID namespace the program cannot even name a host process
    assert r.status == "error" and r.error_type in ("PermissionError", "ProcessLookupError") and "signal" in r.blocked
    assert planted(fence("print(42)")).run_last().stdout == "42\n"  # this process and the sandbox survived


def test_run_contains_killing_the_process_group(planted):
    pid = os.getpid()
    r = planted(fence(f"import os\nos.killpg(os.getpgid({pid}), 9)")).run_last()
    assert r.status == "error"
    assert planted(fence("print(1)")).run_last().status == "ok"


def test_run_contains_a_fork_bomb(planted):
    r = planted(fence("import os\nwhile True:\n    os.fork()")).run_last()
    assert r.status in ("error", "timeout", "killed") and "subprocess" in r.blocked
    assert planted(fence("print(1)")).run_last().status == "ok"


def test_run_stops_an_infinite_loop_and_keeps_its_output(planted):
    s = planted(fence("print('started', flush=True)\nwhile True:\n    pass"))
    s.handle("/set timeout 1")
    try:
        r = s.run_last()
    finally:
        s.handle("/set timeout 2")
    assert r.status == "timeout" and "started" in r.stdout and 0.9 < r.duration_s < 10


def test_run_caps_an_output_flood(planted):
    r = planted(fence("while True:\n    print('y' * 100)")).run_last()
    assert r.status == "output_limit" and r.stdout.startswith("yyy")


def test_run_reports_a_process_that_ends_itself(planted):
    r = planted(fence("import os\nprint('bye', flush=True)\nos._exit(0)")).run_last()
    assert r.status == "killed" and r.stdout == "bye\n"


def test_run_has_no_network_and_cannot_write_outside(planted, tmp_path):
    target = tmp_path / "pwned"
    r = planted(fence(f"open({str(target)!r}, 'w').write('x')")).run_last()
    assert r.status == "error" and not target.exists()
    r = planted(fence("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)")).run_last()
    assert r.status == "error" and "network" in r.blocked
