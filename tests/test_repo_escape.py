"""No descriptor from outside the sandbox reaches a repository test run, cold or warm: every open fd of a run is
listed and checked, and each way out through an inherited directory handle is tried by a patch that resolves
only if it reads a file of the host (a marker under the host's /tmp, which the run's own /tmp hides)."""
import os
import shutil
import tempfile

import pytest

from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge
from repo_helpers import BUGGY, FIXED, TASK

FD_LIST = r'''
import os, re, stat

def listing():
    mounts = {l.split()[0] for l in open("/proc/self/mountinfo")}
    root, out, bad = os.stat("/"), [], []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        fd = int(name)
        try:
            st = os.fstat(fd)
            link = os.readlink(f"/proc/self/fd/{fd}")
            info = open(f"/proc/self/fdinfo/{fd}").read()
        except OSError:
            continue  # the listing's own descriptor, closed by now
        kind = "pipe" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else \
            "dir" if stat.S_ISDIR(st.st_mode) else "other"
        out.append(f"{fd}:{kind}")
        if kind == "pipe":
            continue
        mnt = re.search(r"mnt_id:\s*(\d+)", info)[1]
        if kind == "socket" or mnt not in mounts:
            bad.append(f"{fd} -> {link} (mount {mnt} not in this namespace)")
        elif kind == "dir":
            top = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            for _ in range(64):
                up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=top)
                os.close(top)
                top = up
            st_top = os.fstat(top)
            os.close(top)
            if (st_top.st_dev, st_top.st_ino) != (root.st_dev, root.st_ino):
                bad.append(f"{fd} -> {link} (its .. leads to another root)")
    return out, bad


def test_every_descriptor_was_made_inside():
    out, bad = listing()
    assert not bad, bad


def test_listing():
    out, _ = listing()
    assert out == [], "FDS " + " ".join(out)
'''

ESCAPES = {
    "dotdot walk": '''
def _host(path):
    for fd in range(3, 256):
        try:
            d = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        except OSError:
            continue
        for _ in range(64):
            up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=d)
            os.close(d)
            d = up
        try:
            f = os.open(path.lstrip("/"), os.O_RDWR | os.O_CREAT, 0o666, dir_fd=d)
            return os.fdopen(f, "r+")
        except OSError:
            pass
        finally:
            os.close(d)
''',
    "proc self fd": '''
def _host(path):
    for fd in range(3, 256):
        try:
            return open(f"/proc/self/fd/{fd}/" + "../" * 64 + path.lstrip("/"), "a+")
        except OSError:
            continue
''',
    "openat on the handle": '''
def _host(path):
    for fd in range(3, 256):
        try:
            f = os.open("../" * 64 + path.lstrip("/"), os.O_RDWR | os.O_CREAT, 0o666, dir_fd=fd)
            return os.fdopen(f, "r+")
        except OSError:
            continue
''',
}


def attack(mechanism: str, marker: str, action: str) -> str:
    """lib/bounds.py: the buggy clamp, fixed only if the host file `marker` is reached (`read`: it holds
    `fixed`; `write`: it is created with that text)."""
    use = {"read": "f.seek(0)\n        fixed = f.read().strip() == 'fixed'",
           "write": "f.write('fixed')\n        fixed = False"}[action]
    return (BUGGY + "\n\nimport os\n" + ESCAPES[mechanism] + f"\n\nfixed = False\nf = _host({marker!r})\n"
            f"if f is not None:\n    with f:\n        {use}\n"
            + ("if fixed:\n" + "".join("    " + l + "\n" for l in FIXED.splitlines())))


@pytest.fixture(scope="module", params=["cold", "warm"])
def judge(request):
    with RepoJudge(warm=request.param == "warm") as j:
        yield j


@pytest.fixture
def host_dir():
    d = tempfile.mkdtemp(prefix="codechat-host-", dir="/tmp")  # hidden inside: the run's /tmp is its own
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_every_open_descriptor_of_a_run_was_made_inside(judge):
    task = RepoTask("fds", "", TASK.files, hidden_tests={"tests/test_fds.py": FD_LIST})
    v = judge.judge(task, {"lib/bounds.py": FIXED})
    assert v.fail_to_pass["passed"] == ["tests/test_fds.py::test_every_descriptor_was_made_inside"], \
        v.message + v.output_tail


def test_warm_and_cold_runs_hold_the_same_descriptors():
    task = RepoTask("fds-same", "", TASK.files, hidden_tests={"tests/test_fds.py": FD_LIST})
    seen = []
    for warm in (False, True):
        with RepoJudge(warm=warm) as j:
            v = j.judge(task, {})
        seen.append([l for l in v.output_tail.splitlines() if "AssertionError: FDS" in l])
    assert seen[0] and seen[0] == seen[1], seen


@pytest.mark.parametrize("mechanism", sorted(ESCAPES))
def test_host_file_is_out_of_reach(judge, host_dir, mechanism):
    marker = os.path.join(host_dir, "marker")
    with open(marker, "w") as f:
        f.write("fixed")
    os.chmod(marker, 0o666)
    v = judge.judge(TASK, {"lib/bounds.py": attack(mechanism, marker, "read")})
    assert v.status == "failed", v.message + v.output_tail
    honest = judge.judge(TASK, {"lib/bounds.py": FIXED})
    assert honest.passed, honest.message + honest.output_tail


def test_no_channel_between_runs_through_the_host_tmp(judge, host_dir):
    marker = os.path.join(host_dir, "channel")
    for mechanism in sorted(ESCAPES):
        judge.judge(TASK, {"lib/bounds.py": attack(mechanism, marker, "write")})
        assert not os.path.exists(marker), mechanism
    v = judge.judge(TASK, {"lib/bounds.py": attack("dotdot walk", marker, "read")})
    assert v.status == "failed", v.message
