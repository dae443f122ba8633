"""OS isolation of sandboxed programs: one protection per test.

Each program returns what it could observe, or raises; the verdict's message carries it back. Tests that
need root (own uid, namespaces) skip elsewhere; the fallback warning is tested on its own.
"""
import os
import time
from pathlib import Path

import pytest

from codechat.config import VerifierConfig
from codechat.sandbox.pool import missing_protections_message
from codechat.tasks import Task
from codechat.verify import Verifier

ROOT = os.geteuid() == 0
T = Task("probe", "", ["assert probe() == 'ok'"], "probe")


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=3, memory_mb=512, nproc=32)) as v:
        yield v


def run(v, body: str):
    """Run `def probe(): <body>` and return the verdict."""
    code = "import os, sys, socket, signal, time\ndef probe():\n" + "".join(f"    {ln}\n" for ln in body.splitlines())
    return v.verify(T, code)


def sandbox_processes(uids: list[int]) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid_line = next((ln for ln in status.splitlines() if ln.startswith("Uid:")), "")
        if uid_line and int(uid_line.split()[1]) in uids:
            found.append(int(pid))
    return found


def test_no_network_even_loopback(verifier):
    v = run(verifier, "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
                      "socket.create_connection(s.getsockname(), timeout=0.5)\nreturn 'ok'")
    assert v.status == "error" and v.error_type == "OSError"
    assert "network" in v.blocked


@pytest.mark.skipif(not ROOT, reason="own uid only when running as root")
def test_runs_as_an_unprivileged_uid(verifier):
    v = run(verifier, "return 'ok' if os.getuid() != 0 and os.geteuid() != 0 else 'root'")
    assert v.passed


def test_cannot_signal_the_parent(verifier):
    v = run(verifier, "os.kill(os.getppid(), signal.SIGKILL)\nreturn 'ok'")
    assert not v.passed and "signal" in v.blocked
    assert run(verifier, "return 'ok'").passed  # the zygote survived


def test_environment_is_scrubbed():
    os.environ["CODECHAT_TEST_SECRET"] = "hunter2"
    try:
        with Verifier(VerifierConfig(workers=1, timeout_s=3)) as v:
            verdict = run(v, "return 'ok' if not any('hunter2' in x for x in os.environ.values()) else 'leak'")
    finally:
        del os.environ["CODECHAT_TEST_SECRET"]
    assert verdict.passed


def test_fresh_temp_cwd_each_program(verifier):
    first = run(verifier, "open('mark', 'w').write('x')\nraise ValueError(os.getcwd())")
    second = run(verifier, "return 'ok' if not os.path.exists('mark') and os.listdir('.') == [] else 'dirty'")
    assert first.error_type == "ValueError" and second.passed


def test_files_left_in_tmp_are_removed_and_reported(verifier):
    first = run(verifier, "open('/tmp/leftover', 'w').write('x')\nreturn 'ok'")
    second = run(verifier, "return 'ok' if not os.path.exists('/tmp/leftover') else 'left'")
    assert "write_outside" in first.blocked and second.passed


def test_file_size_cap(verifier):
    v = run(verifier, "open('big', 'wb').write(b'x' * (64 << 20))\nreturn 'ok'")
    assert v.status in ("error", "memory") and not v.passed


def test_open_files_cap(verifier):
    v = run(verifier, "fs = [open('/dev/null') for _ in range(10000)]\nreturn 'ok'")
    assert v.status == "error" and v.error_type == "OSError"


def test_memory_limit(verifier):
    v = run(verifier, "x = bytearray(2 << 30)\nreturn 'ok'")
    assert v.status == "memory"


@pytest.mark.skipif(not ROOT, reason="RLIMIT_NPROC only binds under our own uid")
def test_bounded_fork_bomb_hits_the_process_cap(verifier):
    # fork until refused (children sleep), report how many we got: the cap is 32 processes+threads
    v = run(verifier, "n = 0\nfor _ in range(500):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
                      "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nraise ValueError(n)")
    assert v.error_type == "ValueError" and int(v.message.split(": ")[-1]) < 32
    assert not sandbox_processes(verifier.pool.sandbox_uids())


@pytest.mark.skipif(not ROOT, reason="uid-based check")
def test_no_survivors_after_double_fork_setsid(verifier):
    v = run(verifier, "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
                      "time.sleep(0.1)\nreturn 'ok'")
    assert v.passed
    assert not sandbox_processes(verifier.pool.sandbox_uids())


@pytest.mark.skipif(not ROOT, reason="mount namespace needs root here")
def test_hidden_paths_are_invisible():
    secret = Path("/run") / f"codechat-hidden-{os.getpid()}"
    secret.mkdir(mode=0o755)
    (secret / "tests.jsonl").write_text("expected answers")
    os.chmod(secret / "tests.jsonl", 0o644)
    body = f"return 'ok' if not os.path.exists({str(secret / 'tests.jsonl')!r}) else 'visible'"
    try:
        with Verifier(VerifierConfig(workers=1, timeout_s=3)) as plain:
            assert not run(plain, body).passed  # world-readable and not hidden: the program sees it
        with Verifier(VerifierConfig(workers=1, timeout_s=3, hide_paths=[str(secret)])) as hiding:
            assert run(hiding, body).passed
    finally:
        (secret / "tests.jsonl").unlink()
        secret.rmdir()


@pytest.mark.skipif(not ROOT, reason="/root is 0700: readable only by root")
def test_root_only_files_are_unreadable(verifier):
    v = run(verifier, "open('/etc/shadow').read()\nreturn 'ok'")
    assert v.error_type == "PermissionError"


def test_fallback_warning_lists_active_and_missing_protections():
    msg = missing_protections_message(["network"])
    assert "active: network" in msg and "missing: private_tmp, hidden_paths, own_uid" in msg
    assert missing_protections_message(["network", "private_tmp", "hidden_paths", "own_uid"]) is None


def test_wall_clock_limit_is_kept(verifier):
    t0 = time.monotonic()
    v = run(verifier, "time.sleep(30)\nreturn 'ok'")
    assert v.status == "timeout" and time.monotonic() - t0 < 3 + 1
