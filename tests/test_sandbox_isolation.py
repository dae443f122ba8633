"""OS isolation of sandboxed programs: one protection per test.

Each program returns what it could observe, or raises; the verdict's message carries it back. Tests that
need root (own uid, namespaces) skip elsewhere; the fallback warning is tested on its own.
"""
import hashlib
import os
import time
from pathlib import Path

import pytest

from codechat.config import VerifierConfig
from codechat.sandbox.pool import ALL_PROTECTIONS, missing_protections_message
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

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
        zombie = "\nState:\tZ" in status  # dead, not yet collected by the zygote: it runs nothing
        if uid_line and int(uid_line.split()[1]) in uids and not zombie:
            found.append(int(pid))
    return found


def test_no_network_even_loopback(verifier):
    v = run(verifier, "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
                      "socket.create_connection(s.getsockname(), timeout=0.5)\nreturn 'ok'")
    assert v.status == "error" and v.error_type == "OSError"
    # the seccomp filter refuses the socket itself; without it the audit hook reports the bind
    assert "Address family not supported" in v.message or "network" in v.blocked


@pytest.mark.skipif(not ROOT, reason="network namespace as root")
def test_network_namespace_has_only_loopback(verifier):
    # the namespace layer alone (seccomp stops sockets first): the program's view has no interface but lo
    v = run(verifier, "names = [ln.split(':')[0].strip() for ln in open('/proc/self/net/dev').read().splitlines()[2:]]\n"
                      "return 'ok' if names == ['lo'] else repr(names)")
    assert v.passed, v.message


@pytest.mark.skipif(not ROOT, reason="own uid only when running as root")
def test_runs_as_an_unprivileged_uid(verifier):
    v = run(verifier, "return 'ok' if os.getuid() != 0 and os.geteuid() != 0 else 'root'")
    assert v.passed


def test_cannot_signal_the_parent(verifier):
    # in its PID namespace the program has no visible parent (getppid() == 0) and no host pid exists; as
    # its own uid it could not signal ours anyway (PermissionError when there is no PID namespace)
    v = run(verifier, f"hits = []\nfor pid in (os.getppid(), {os.getpid()}):\n    try:\n"
                      "        os.kill(pid, signal.SIGKILL)\n        hits.append(pid)\n"
                      "    except (ProcessLookupError, PermissionError):\n        pass\n"
                      "return 'ok' if hits in ([], [0]) else repr(hits)")
    assert "signal" in v.blocked and (v.passed or v.status == "error"), v
    assert run(verifier, "return 'ok'").passed  # the zygote survived (and so did we)


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
            assert run(plain, body).passed  # world-readable and not hidden: the fresh root has no /run at all
        with Verifier(VerifierConfig(workers=1, timeout_s=3, hide_paths=[str(secret)])) as hiding:
            assert run(hiding, body).passed
    finally:
        (secret / "tests.jsonl").unlink()
        secret.rmdir()


@pytest.mark.skipif(not ROOT, reason="/root is 0700: readable only by root")
def test_root_only_files_are_unreadable(verifier):
    # absent from the fresh root; without one, the program's own uid cannot read it
    v = run(verifier, "open('/etc/shadow').read()\nreturn 'ok'")
    assert v.error_type in ("FileNotFoundError", "PermissionError")


def test_fallback_warning_lists_active_and_missing_protections():
    msg = missing_protections_message(["network", "seccomp"])
    assert "active: network, seccomp" in msg
    assert "missing: fresh_root, pid_namespace, ipc_namespace, own_uid" in msg
    assert missing_protections_message(list(ALL_PROTECTIONS)) is None


def test_wall_clock_limit_is_kept(verifier):
    t0 = time.monotonic()
    v = run(verifier, "time.sleep(30)\nreturn 'ok'")
    assert v.status == "timeout" and time.monotonic() - t0 < 3 + 1


def test_cleanup_does_not_follow_a_link_planted_at_the_temp_dir():
    # the program moves its temp dir away and leaves a link to a directory of ours in its place; removing
    # "the temp dir" afterwards (as root) must remove the link, never what it points to
    victim = Path("/run") / f"codechat-victim-{os.getpid()}"
    victim.mkdir(mode=0o755)
    (victim / "precious.txt").write_text("keep me")
    code = ("import os\ncwd = os.getcwd()\nos.chdir('/')\nos.rename(cwd, cwd + '-moved')\n"
            f"os.symlink({str(victim)!r}, cwd)\n"
            "def probe():\n    return 'ok'\n")
    try:
        with Verifier(VerifierConfig(workers=1, timeout_s=3)) as v:
            v.verify(T, code)
            assert run(v, "return 'ok' if os.listdir('.') == [] else 'dirty'").passed  # the next cwd is fresh
        assert (victim / "precious.txt").read_text() == "keep me"
    finally:
        for p in victim.iterdir():
            p.unlink()
        victim.rmdir()


def test_a_program_cannot_find_the_previous_programs_output_in_its_memory():
    # the process that forks programs (the zygote) never handles job data (output, results, tests): that is
    # the supervisor's, which no program is forked from. Program 2 scans its anonymous memory for what
    # program 1 printed, reassembling the marker at run time so that its own code does not contain it.
    token = os.urandom(8).hex()
    first = f"print('LEAK' + 'MARK-{token}')\ndef probe():\n    return 'ok'\n"
    digest = hashlib.sha256(token.encode()).hexdigest()  # program 2 knows only this, not the token
    second = ("import ctypes, hashlib\n"
              "def probe():\n"
              "    prefix, found = ('LEAK' + 'MARK-').encode(), 0\n"
              "    for line in open('/proc/self/maps'):\n"  # anonymous memory: heap, arenas, stack
              "        f = line.split()\n"
              "        if f[1][0] != 'r' or (len(f) > 5 and f[5] not in ('[heap]', '[stack]')):\n"
              "            continue\n"
              "        a, b = (int(x, 16) for x in f[0].split('-'))\n"
              "        mem = ctypes.string_at(a, b - a)\n"
              "        i = mem.find(prefix)\n"
              "        while i >= 0:\n"
              f"            found += hashlib.sha256(mem[i + 9:i + 25]).hexdigest() == {digest!r}\n"
              "            i = mem.find(prefix, i + 1)\n"
              "    return 'ok' if found == 0 else f'found {found}'\n")
    with Verifier(VerifierConfig(workers=1, timeout_s=10, memory_mb=1024)) as v:
        assert v.verify(T, first).passed
        verdict = v.verify(T, second)
    assert verdict.passed, verdict.message


@pytest.mark.skipif(not ROOT, reason="mount namespaces need root")
def test_codechat_installed_under_tmp_still_verifies(tmp_path):
    """The sandbox covers /tmp with an empty tmpfs; codechat cloned or installed there (tmp_path is under /tmp)
    must still run its programs, and those must still see an empty /tmp otherwise."""
    import shutil
    import subprocess
    import sys

    src = Path(__file__).resolve().parents[1] / "codechat"
    shutil.copytree(src, tmp_path / "clone" / "codechat", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "secret.txt").write_text("x")
    program = f"import os\ndef f():\n    return 1 + (not os.path.exists({str(tmp_path / 'secret.txt')!r}))\n"
    probe = ("from codechat.config import VerifierConfig\nfrom codechat.tasks import Task\n"
             "from codechat.verifier.verify import Verifier\nimport codechat, os\nassert codechat.__file__.startswith('/tmp/')\n"
             "t = Task('p', '', ['assert f() == 2'], 'f')\n"
             f"code = {program!r}\n"
             "with Verifier(VerifierConfig(workers=1)) as v:\n    print(v.verify(t, code).status)\n")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path / "clone")), cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "passed"  # ran, and /tmp's other files stayed hidden
