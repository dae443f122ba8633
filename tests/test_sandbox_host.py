"""What a program can reach of the host (the OS layer): the fresh root, a PID and an IPC namespace per
program, cleanup that never walks what a program built, `verify --check`. One attack per test; the seccomp
filter has its own file (test_sandbox_seccomp.py).

Tests that need root (namespaces, mounts) skip elsewhere; the iterative cleanup is also checked without root.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codechat
from codechat.cli import main
from codechat.config import VerifierConfig
from codechat.sandbox import cgroup, isolation, rootfs
from codechat.sandbox.pool import ALL_PROTECTIONS, Job, SandboxPool
from codechat.tasks import Task
from codechat.verifier.verify import Verifier
from sandbox_helpers import OWN_TMP, ROOT, root_only, run

REPO = Path(__file__).resolve().parents[1]
ARCH = os.uname().machine


@pytest.fixture(scope="module")
def verifier():
    # one worker: programs run one after the other in the same zygote, the case where they could cooperate
    with Verifier(VerifierConfig(workers=1, timeout_s=5, memory_mb=512, nproc=32)) as v:
        yield v


def sandbox_processes(uids: list[int]) -> list[tuple[int, str]]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid_line = next((ln for ln in status.splitlines() if ln.startswith("Uid:")), "")
        zombie = "\nState:\tZ" in status  # dead, not yet collected by the zygote: it runs nothing
        if uid_line and int(uid_line.split()[1]) in uids and not zombie:
            found.append((int(pid), status.split("State:")[1].split("\n")[0].strip()))
    return found


# --- the fresh root ---------------------------------------------------------------------------------------------
@root_only
def test_a_program_cannot_import_the_reference_solutions(verifier):
    # the attack that passed every built-in set: import codechat.tasks, find the task, run its stored solution
    task = Task("basic/reverse_string", "Write reverse_string(s).", ["assert reverse_string('abc') == 'cba'"],
                "reverse_string")
    steal = ("from codechat.tasks import load_tasks\n"
             "for t in load_tasks('builtin'):\n"
             "    if t.entry_point == 'reverse_string':\n"
             "        exec(t.solution)\n")
    v = verifier.verify(task, steal)
    assert not v.passed and v.error_type == "ModuleNotFoundError", v


@root_only
def test_task_files_and_the_checkout_do_not_exist_inside(verifier):
    paths = [Path(codechat.__file__).parent / "tasks" / "data" / "basic.jsonl", REPO / "README.md",
             REPO / "tests" / "attacks" / "attacks.jsonl", REPO.parent / "shared", Path(codechat.__file__)]
    v = run(verifier, f"seen = [p for p in {[str(p) for p in paths]!r} if os.path.exists(p)]\n"
                      "return 'ok' if not seen else repr(seen)")
    assert v.passed, v.message


@root_only
def test_no_host_etc_home_root_run_or_user_caches(verifier):
    v = run(verifier, "seen = [p for p in ('/etc/passwd', '/etc/hostname', '/home', '/root/.cache', '/root/.netrc', "
                      "'/root/.cache/huggingface/token', '/root/.config/wandb', '/run', '/var/lib', '/var/log', "
                      "'/sys', '/boot', '/opt', '/mnt') if os.path.lexists(p)]\n"
                      "etc = sorted(os.listdir('/etc'))\n"
                      "return 'ok' if not seen and etc == ['hosts', 'ld.so.cache', 'nsswitch.conf'] else repr((seen, etc))")
    assert v.passed, v.message


@root_only
def test_python_and_its_libraries_are_read_only(verifier):
    v = run(verifier, "import json\nerrs = []\n"
                      "for d in (os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(json.__file__)),\n"
                      "          '/usr/lib', '/'):\n"
                      "    try:\n        open(os.path.join(d, 'planted.py'), 'w').write('x = 1')\n"
                      "        errs.append('wrote ' + d)\n"
                      "    except OSError as e:\n        errs.append(e.errno)\n"
                      "import errno\nreturn 'ok' if set(errs) <= {errno.EROFS, errno.EACCES} else repr(errs)")
    assert v.passed, v.message


@root_only
def test_the_program_has_its_own_proc(verifier):
    # process 1 of its namespace; /proc shows no host process (ours included) and no system-wide figure: every
    # such entry is covered, unreadable (not even the host's CPU and load figures, a channel between programs)
    v = run(verifier, f"pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
                      f"host = [p for p in ('1', '{os.getpid()}', '{os.getppid()}') if p in pids and p != '1']\n"
                      "read, names = [], [n for n in os.listdir('/proc') if not n.isdigit()]\n"
                      "for p in ['/proc/' + n for n in names if n != 'meminfo'] + ['/proc/sys/kernel/hostname']:\n"
                      "    first = os.readlink(p).split('/')[0] if os.path.islink(p) else ''\n"
                      "    if first in ('self', 'thread-self') or first.isdigit():  # into a process: its own\n"
                      "        continue\n"
                      "    try:\n        read.append((p, os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read(64)))\n"
                      "    except OSError:\n        pass\n"
                      "if not {'stat', 'loadavg', 'sys', 'kallsyms'} <= set(names):\n"
                      "    read.append(('names', names))\n"
                      "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                      "unmounted = libc.umount2(b'/proc/stat', 2) == 0 or libc.umount2(b'/proc/meminfo', 2) == 0\n"
                      "return 'ok' if os.getpid() == 1 and len(pids) == 1 and not host and not read and not unmounted "
                      "else repr((os.getpid(), pids, host, read, unmounted))")
    assert v.passed, v.message


@root_only
def test_meminfo_is_a_fixed_text_that_psutil_reads(verifier):
    # dask reads psutil.virtual_memory() at import: the one system-wide file shown, the same for every program
    # (the host's total, all of it free), so it carries nothing from one program to the next
    pytest.importorskip("psutil")
    total = rootfs.host_mem_total_kb()
    v = run(verifier, "text = open('/proc/meminfo').read()\n"
                      "import psutil\nvm = psutil.virtual_memory()\n"
                      f"want = {rootfs.meminfo_text(total)!r}\n"
                      f"return 'ok' if text == want and vm.total == vm.available == {total} * 1024 else "
                      "repr((text[:200], vm))")
    assert v.passed, v.message
    lines = rootfs.meminfo_text(total).splitlines()
    assert lines[0] == f"MemTotal:       {total:>8} kB" and any(line.startswith("Committed_AS:") for line in lines)


PROC_PROBE = """
import os, sys
from codechat.sandbox import isolation, rootfs
assert isolation._unshare(isolation.CLONE_NEWNS)
rootfs.mount("none", "/", None, rootfs.MS_REC | rootfs.MS_PRIVATE)
root = sys.argv[1]
rootfs.mount("tmpfs", root, "tmpfs", 0, "size=1m")
os.mkdir(root + "/proc")
if sys.argv[2] == "fail":  # a cover that cannot be mounted, after two that could (two mounts each)
    real, made = rootfs.mount, []
    def mount(src, target, *a):
        if target.startswith(root + "/proc/"):
            if len(made) == 4:
                raise OSError(22, "no cover")
            made.append(target)
        real(src, target, *a)
    rootfs.mount = mount
kind = rootfs.mount_proc(root + "/proc", root + "/.covers")
names = sorted(n for n in os.listdir(root + "/proc") if not n.isdigit())
under = [ln.split()[4] for ln in open("/proc/self/mountinfo") if ln.split()[4].startswith(root + "/proc/")]
print(kind, "stat" in names, "meminfo" in names, len(under))
"""


@root_only
@pytest.mark.parametrize("case, want", [("ok", "full True True"), ("fail", "pids False False 0")])
def test_proc_is_covered_whole_or_processes_only(tmp_path, case, want):
    # never a full proc instance with some entries left uncovered: a cover that fails gives the pid-only view
    out = subprocess.run([sys.executable, "-c", PROC_PROBE, str(tmp_path), case], capture_output=True, text=True,
                         cwd=Path(codechat.__file__).parent.parent, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(want), out.stdout
    if case == "ok":  # every system-wide entry but the links into processes carries a cover
        assert int(out.stdout.split()[3]) >= 20, out.stdout


@root_only
def test_every_pool_gets_the_view_without_hide_paths():
    # the view does not depend on the caller: every mode (CLI verify, train, eval, chat /run, the Ray node
    # actors) runs programs through a SandboxPool, and a bare one, with no hide_paths, has it
    pool = SandboxPool(1)
    try:
        r = pool.run(Job("tests", "import codechat.tasks\ndef f():\n    return 1\n", entry_point="f",
                         tests=["assert f() == 1"]))
        assert "fresh_root" in pool.active
    finally:
        pool.close()
    assert r.status == "error" and r.error_type == "ModuleNotFoundError", r


@root_only
def test_hide_paths_still_covers_dirs_inside_the_view():
    # hide_paths matters inside the view only: a dir under an exposed one (here an installed package) is empty
    import hypothesis
    pkg = os.path.dirname(hypothesis.__file__)
    body = f"return 'ok' if os.listdir({pkg!r}) == [] else 'visible'"
    with Verifier(VerifierConfig(workers=1, timeout_s=5)) as plain:
        assert not run(plain, body).passed
    with Verifier(VerifierConfig(workers=1, timeout_s=5, hide_paths=[pkg])) as hiding:
        assert run(hiding, body).passed


# --- cooperation across programs --------------------------------------------------------------------------------
DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue", "/run/shm", ".", "~")


@root_only
def test_two_programs_cannot_pass_data_through_files(verifier):
    marker = f"codechat-answers-{os.getpid()}"
    first = run(verifier, f"left = []\nfor d in {DIRS!r}:\n    try:\n"
                          f"        open(os.path.join(os.path.expanduser(d), {marker!r}), 'w').write('42')\n"
                          "        left.append(d)\n    except OSError:\n        pass\n"
                          "raise ValueError(left)")
    assert first.error_type == "ValueError" and "/tmp" in first.message  # it could write somewhere
    second = run(verifier, f"found = [d for d in {DIRS!r}\n"
                           f"         if os.path.exists(os.path.join(os.path.expanduser(d), {marker!r}))]\n"
                           "return 'ok' if not found else repr(found)")
    assert second.passed, second.message
    assert not any(Path(d, marker).exists() for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"))  # host untouched


SYSV = ("libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "KEY = 0x5EC0DE\n")


@root_only
def test_two_programs_cannot_pass_data_through_sysv_ipc(verifier):
    # shared memory, a message queue and a semaphore set under a fixed key: all die with the IPC namespace
    first = run(verifier, "shm = libc.shmget(KEY, 4096, 0o1666)\naddr = libc.shmat(shm, None, 0)\n"
                          "ctypes.memmove(addr, b'answer=42', 9)\n"
                          "msg = libc.msgget(KEY, 0o1666)\nsem = libc.semget(KEY, 1, 0o1666)\n"
                          "raise ValueError(shm, msg, sem)", head=SYSV)
    assert first.error_type == "ValueError" and "-1" not in first.message, first.message  # all three made
    second = run(verifier, "found = [n for n, f in (('shm', lambda: libc.shmget(KEY, 0, 0)),\n"
                           "                       ('msg', lambda: libc.msgget(KEY, 0)),\n"
                           "                       ('sem', lambda: libc.semget(KEY, 0, 0))) if f() >= 0]\n"
                           "return 'ok' if not found else repr(found)", head=SYSV)
    assert second.passed, second.message


@root_only
def test_two_programs_cannot_pass_data_through_posix_queues(verifier):
    head = ("rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
            "NAME = b'/codechat-answers'\n")
    first = run(verifier, "q = rt.mq_open(NAME, os.O_CREAT | os.O_RDWR, 0o666, None)\n"
                          "rt.mq_send(q, b'42', 2, 0)\nraise ValueError(q)", head=head)
    assert first.error_type == "ValueError" and first.message.split(": ")[-1] != "-1", first.message
    second = run(verifier, "q = rt.mq_open(NAME, os.O_RDONLY)\nreturn 'ok' if q == -1 else 'found'", head=head)
    assert second.passed, second.message


# --- nothing outlives a verdict ---------------------------------------------------------------------------------
@root_only
def test_nothing_a_program_started_outlives_its_verdict(verifier):
    # a grandchild that left the process group kills everything of the uid, again and again: the next
    # (honest) program must never be hit, and no process of the uid may exist once the verdict is back
    killer = ("if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        for _ in range(200000):\n            try:\n                os.kill(-1, 9)\n"
              "            except OSError:\n                pass\n    os._exit(0)\nreturn 'ok'")
    uids = verifier.pool.sandbox_uids()
    for attempt in range(60):
        run(verifier, killer)
        left = sandbox_processes(uids)
        assert not left, f"attempt {attempt}: {left} survived the verdict"
        honest = run(verifier, "time.sleep(0.01)\nreturn 'ok'")
        assert honest.passed, f"attempt {attempt}: {honest}"


# --- cleanup never walks program-made structure ----------------------------------------------------------------
DEEP = ("def deep(where, n):\n    os.chdir(where)\n    for _ in range(n):\n        os.mkdir('d')\n"
        "        os.chdir('d')\n    os.chdir('/')\n")


@root_only
def test_a_tree_deeper_than_the_recursion_limit_does_not_poison_the_worker(verifier):
    v = run(verifier, "start = os.getcwd()\ndeep(start, 1500)\n"
                      "os.mkdir('/tmp/mine')\ndeep('/tmp/mine', 1500)\nreturn 'ok'", head=DEEP)
    assert v.passed and "write_outside" in v.blocked, v
    for _ in range(3):  # the same worker goes on, with an empty temp dir and /tmp
        after = run(verifier, f"names = {OWN_TMP}\n"
                              "return 'ok' if os.listdir('.') == [] and names == [os.path.basename(os.getcwd())] "
                              "else repr(names)")
        assert after.passed, after.message


def test_rmtree_is_iterative_and_never_follows_links(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep me")
    top = tmp_path / "tree"
    top.mkdir()
    os.symlink(victim, top / "link")
    fd = os.open(top, os.O_RDONLY)
    for _ in range(sys.getrecursionlimit() + 1200):  # deeper than PATH_MAX too: built through dir fds
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.symlink(victim, "link", dir_fd=fd)
    os.close(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    isolation.rmtree(str(top))
    assert not top.exists() and (victim / "keep.txt").read_text() == "keep me"


# --- reporting --------------------------------------------------------------------------------------------------
def test_verify_check_prints_one_line_per_protection(capsys):
    rc = main(["verify", "--check"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    for p in ALL_PROTECTIONS:
        line = next(ln for ln in out if ln.split()[1:2] == [p])
        needs_more = p == "memory_cgroup" and cgroup.parent_dir() is None  # (root, but no writable cgroup)
        assert line.startswith("active") if ROOT and not needs_more else line.startswith(("active", "MISSING"))


# --- fuzz: program-made trees ----------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["dir", "file", "link_out", "link_up", "fifo"]),
                          st.text("abc.-_ ", min_size=1, max_size=8)), max_size=40))
def test_rmtree_removes_any_program_made_tree_and_nothing_else(tmp_path_factory, spec):
    base = tmp_path_factory.mktemp("fuzz")
    victim = base / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep me")
    top = base / "tree"
    top.mkdir()
    dirs = [top]
    for parent, kind, name in spec:
        where = dirs[parent % len(dirs)] / name
        if os.path.lexists(where) or name in (".", ".."):
            continue
        if kind == "dir":
            where.mkdir()
            dirs.append(where)
        elif kind == "file":
            where.write_text("x")
        elif kind == "fifo":
            os.mkfifo(where)
        else:
            os.symlink(victim if kind == "link_out" else "..", where)
    isolation.rmtree(str(top))
    assert not os.path.lexists(top)
    assert sorted(os.listdir(victim)) == ["keep.txt"] and (victim / "keep.txt").read_text() == "keep me"




# --- a mixed batch through the CLI ------------------------------------------------------------------------------
@root_only
def test_a_mixed_batch_with_hostile_neighbours_verifies_every_honest_sample(tmp_path):
    attacks = [json.loads(ln) for ln in (REPO / "tests" / "attacks" / "attacks.jsonl").read_text().splitlines()]
    hostile = [a for a in attacks if a["id"] in HOST_ATTACKS]
    assert len(hostile) == len(HOST_ATTACKS)
    tasks = {a["task"]["task_id"]: a["task"] for a in hostile}
    honest = {"add": "def add(a, b):\n    return a + b\n",
              "basic/reverse_string": "def reverse_string(s):\n    return s[::-1]\n"}
    wrong = {"add": "def add(a, b):\n    return a - b\n", "basic/reverse_string": "def reverse_string(s):\n    return s\n"}
    rows = []
    for rnd in range(2):
        for a in hostile:  # each hostile sample is followed, on the same worker, by an honest and a wrong one
            tid = a["task"]["task_id"]
            rows += [(tid, a["completion"], "hostile"), (tid, honest[tid], "honest"), (tid, wrong[tid], "wrong")]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks.values()))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"task_id": t, "completion": c, "sample_id": k}) + "\n"
                                              for t, c, k in rows))
    rc = main(["verify", "--tasks", str(tmp_path / "t.jsonl"), "--completions", str(tmp_path / "c.jsonl"),
               "--out", str(tmp_path / "r.jsonl"), "--workers", "2", "--quiet"])
    assert rc == 0
    got = [json.loads(ln) for ln in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(got) == len(rows)
    wrong_verdicts = [(r["line"], r["sample_id"], r["status"]) for r in got
                      if (r["sample_id"] == "honest") != (r["status"] == "passed")]
    assert not wrong_verdicts


HOST_ATTACKS = ("steal_reference_solution", "read_task_file_from_disk", "shared_dir_answer_cache",
                "sysv_shm_answer_cache", "grandchild_kills_neighbours", "userns_mount_escape",
                "deep_tree_in_tmp_and_cwd")
