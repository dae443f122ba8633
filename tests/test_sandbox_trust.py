"""Attacks on what programs share with each other and with the host: counters, memory, the judge's privileges.

Each test runs programs one after the other on one worker (the case where two could cooperate), or attacks the
judge through a test that evaluates what the program returned.
"""
from __future__ import annotations

import os

import pytest

from codechat.config import VerifierConfig
from codechat.sandbox import cgroup
from codechat.sandbox.pool import protection_report
from codechat.tasks import Task
from codechat.verifier.verify import Verifier
from sandbox_helpers import OWN_TMP, root_only, run


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=1, timeout_s=10, memory_mb=512, nproc=32)) as v:
        yield v


def reported(verdict) -> str:
    """What a probe program reported through its exception's message (without the "test N: " prefix)."""
    assert verdict.error_type == "ValueError", (verdict.status, verdict.error_type, verdict.message)
    return verdict.message.split(": ", 1)[1]


# --- no counter passes from one program to the next ------------------------------------------------------------
INODES = ("out = []\n"
          "for d in ('/tmp', '/dev/shm', '/var/tmp', '.'):\n"
          "    p = os.path.join(d, 'probe-file')\n"
          "    open(p, 'w').close()\n"
          "    out.append(os.stat(p).st_ino)\n"
          "    os.unlink(p)\n"
          "raise ValueError(out)")


@root_only
def test_inode_numbers_do_not_carry_from_one_program_to_the_next(verifier):
    # a program that spends inode numbers to encode a value leaves nothing the next one can read: every program
    # sees the same numbers in /tmp (and /dev/shm, /var/tmp) and in its temp dir
    first = reported(run(verifier, INODES))
    spend = run(verifier, "for i in range(300):\n"
                          "    for d in ('/tmp', '.'):\n"
                          "        p = os.path.join(d, f'x{i}')\n"
                          "        open(p, 'w').close()\n"
                          "        os.unlink(p)\n"
                          "os.mkdir('/tmp/left-behind')\n"
                          "return 'ok'")
    assert spend.passed, spend.message
    third = reported(run(verifier, INODES))
    assert third == first


@root_only
def test_a_program_sees_an_empty_tmp_and_the_next_one_too(verifier):
    first = run(verifier, "os.mkdir('/tmp/d')\nopen('/tmp/d/f', 'w').write('42')\nos.symlink('/tmp/d', '/tmp/l')\n"
                          "return 'ok'")
    assert first.passed, first.message
    listing = reported(run(verifier, f"raise ValueError({OWN_TMP}, os.getcwd())"))
    names, cwd = eval(listing)
    assert names == [os.path.basename(cwd)] and names[0].startswith("codechat-"), listing  # only its temp dir



@root_only
def test_the_last_programs_tmp_is_out_of_reach_and_unmounted(verifier):
    # the old /tmp is parked below a root-only dir and unmounted while the next program runs (sandbox/tmp_drop.py)
    probe = ("mark = f'mark-{time.time_ns()}'\nopen('/tmp/' + mark, 'w').write('x')\n"
             "try:\n    os.listdir('/.tmp-old')\n    entered = True\nexcept PermissionError:\n    entered = False\n"
             "parked = sum('/.tmp-old' in line for line in open('/proc/self/mountinfo'))\n"
             f"raise ValueError(entered, parked, {OWN_TMP}, os.getcwd(), mark)")
    for _ in range(20):
        entered, parked, names, cwd, mark = eval(reported(run(verifier, probe)))
        # at most the last one or two, still being unmounted: they never pile up
        assert not entered and parked <= 2, (entered, parked)
        assert names == sorted([mark, os.path.basename(cwd)]), names  # nothing of the last program's /tmp


# --- one memory limit for the whole process tree ----------------------------------------------------------------
cgroup_only = pytest.mark.skipif(cgroup.parent_dir() is None, reason="no writable memory cgroup here")


@cgroup_only
def test_children_together_cannot_hold_more_than_the_memory_limit(verifier):
    # each child stays under the 512 MiB address-space limit; together they hold 6 x 120 MiB
    hog = run(verifier, "kids = []\n"
                        "for i in range(6):\n"
                        "    pid = os.fork()\n"
                        "    if pid == 0:\n"
                        "        b = bytearray(120 << 20)\n"
                        "        for j in range(0, len(b), 4096):\n"
                        "            b[j] = 1\n"
                        "        time.sleep(2)\n"
                        "        os._exit(0)\n"
                        "    kids.append(pid)\n"
                        "codes = [os.waitpid(k, 0)[1] for k in kids]\n"
                        "return 'ok' if codes == [0] * 6 else repr(codes)")
    assert not hog.passed and hog.status == "memory", (hog.status, hog.message)
    after = run(verifier, "b = bytearray(200 << 20)\nreturn 'ok'")  # the worker and the limit are intact
    assert after.passed, after.message


@cgroup_only
def test_memfds_and_tmp_files_count_against_the_memory_limit(verifier):
    # written, never mapped: outside every address space; 40 memfds x 15 MiB (under the file-size limit)
    hog = run(verifier, "fds = []\n"
                        "for i in range(40):\n"
                        "    fd = os.memfd_create(f'm{i}')\n"
                        "    for j in range(15):\n"
                        "        os.write(fd, b'x' * (1 << 20))\n"
                        "    fds.append(fd)\n"
                        "return 'ok'")
    assert not hog.passed and hog.status == "memory", (hog.status, hog.message)
    after = run(verifier, "b = bytearray(200 << 20)\nreturn 'ok'")
    assert after.passed, after.message


def test_verify_check_says_what_the_memory_limit_covers(capsys):
    line = next(ln for ln in protection_report([]) if "memory_cgroup" in ln)
    assert line.startswith("MISSING") and "address space" in line and "memfd" in line


# --- the judge gives up root before it runs task code on program values -----------------------------------------
EVAL = Task("probe", "", ["assert eval(probe()) == 'ok'"], "probe")  # a test that executes the program's text
JUDGE_PROBE = '''(lambda os: (_ for _ in ()).throw(ValueError(repr({
    "uid": os.getuid(), "euid": os.geteuid(), "pid": os.getpid(),
    "status": {l.split(":")[0]: l.split(":")[1].strip() for l in open("/proc/self/status")
               if l.split(":")[0] in ("CapEff", "CapPrm", "NoNewPrivs", "Seccomp")},
    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "tmp": os.listdir("/tmp"), "self": int(os.readlink("/proc/self")),
    "carried": [l.split()[4].split("/")[2] for l in open("/proc/self/mountinfo") if l.split()[4].startswith("/tmp/")],
}))))(__import__("os"))'''


def judge_view(v) -> dict:
    verdict = v.verify(EVAL, f"def probe():\n    return {JUDGE_PROBE!r}\n")
    return eval(reported(verdict))


@root_only
def test_program_text_the_tests_evaluate_runs_without_root_or_privileges(verifier):
    seen = judge_view(verifier)
    assert seen["uid"] != 0 and seen["euid"] != 0, seen
    assert int(seen["status"]["CapEff"], 16) == 0 and int(seen["status"]["CapPrm"], 16) == 0, seen
    assert seen["status"]["NoNewPrivs"] == "1" and seen["status"]["Seccomp"] == "2", seen


@root_only
def test_the_judge_sees_no_other_process_and_not_the_programs_tmp(verifier):
    seen = judge_view(verifier)
    # a process forked for the job in the judge's own PID namespace: /proc shows it nothing but itself (not even
    # the pristine judge it was forked from, which it may not inspect)
    assert seen["pid"] != 1 and seen["procs"] == [seen["self"]], seen
    # its own /tmp: the program's temp dir is not there (only a checkout or Python under the host's /tmp, read-only)
    assert [n for n in seen["tmp"] if n not in seen["carried"]] == [], seen


@root_only
def test_program_text_in_the_judge_cannot_signal_our_processes_or_open_network_sockets(verifier):
    # signal 0 only checks permission: harmless whatever the outcome (a judge with root would reach this pid)
    probe = f"__import__('os').kill({os.getpid()}, 0) or 'ok'"
    verdict = verifier.verify(EVAL, f"def probe():\n    return {probe!r}\n")
    assert not verdict.passed and verdict.error_type in ("ProcessLookupError", "PermissionError"), verdict.message
    sock = verifier.verify(EVAL, "def probe():\n    return \"__import__('socket').socket(2, 1) and 'ok'\"\n")
    assert not sock.passed and "Address family" in sock.message, sock.message


@root_only
def test_program_text_that_patches_the_judge_does_not_judge_the_next_program(verifier):
    # the evaluated text replaces the judge's test runner by one that always passes; it runs in the process
    # forked for that job alone, so the wrong program after it still fails
    patch = ("setattr(__import__('sys').modules['codechat.sandbox.modes'], 'run_tests', "
             "lambda *a, **k: {'status': 'passed', 'tests_passed': 1}) or 'ok'")
    first = verifier.verify(EVAL, f"def probe():\n    return {patch!r}\n")
    assert first.passed  # (that job's own verdict is the program's to decide once its tests execute its text)
    wrong = run(verifier, "return 'no'")
    assert not wrong.passed and wrong.status == "failed", wrong


@cgroup_only
def test_cgroups_left_by_a_killed_parent_are_removed_by_the_next_pool():
    parent, _ = cgroup.parent_dir()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid no process has now
    stale = [os.path.join(parent, f"codechat-{pid}"), os.path.join(parent, f"codechat-{pid}-sup")]
    for d in stale:
        os.mkdir(d)
    mine = cgroup.create(os.getpid())
    try:
        assert mine is not None and not any(os.path.isdir(d) for d in stale)
        assert os.path.isdir(mine["path"]) and os.path.isdir(mine["sup"])
    finally:
        cgroup.remove(mine)
    assert not os.path.isdir(mine["path"])
