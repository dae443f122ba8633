"""A memory cgroup per zygote: one limit for everything a program and its processes allocate.

RLIMIT_AS is per process: with RLIMIT_NPROC at 64, a program's children together can hold 64x its limit, and
memory no process maps (a memfd, a file in /tmp) is in nobody's address space. A memory cgroup counts every page
charged to its processes - anonymous memory of every child, tmpfs and memfd pages, page tables - against one limit.

Layout (cgroup v2 where its memory controller is enabled, else the v1 memory hierarchy):
  <the parent's memory cgroup>/codechat-<zygote pid>      made by the parent (`create`), removed when the zygote
                                                           is gone (`remove`); its limit is the job's `memory_mb`
  <the parent's memory cgroup>/codechat-<zygote pid>-sup  the supervisor (no limit set: a leaf, so cgroup
                                                           v2's no-processes-in-inner-nodes rule holds)
  <the parent's memory cgroup>/codechat-<zygote pid>-judge the judge and the process it forks for each job,
                                                           whose task code may come from a client: limited to
                                                           the judge's memory (`judge_join`, once per judge)
The zygote joins it once at start (before its namespaces), so every program it forks starts inside it: no
migration per program (moving a process between cgroups takes ~10 ms here, three times a whole program). The
supervisor leaves it right after it is forked (its judge, forked by it, is never inside; the supervisor
moves each judge to the judge's cgroup once it is ready, ~10 ms per judge, not per job). The zygote's own
pages written after it joined (a few MiB at most) count against the limit too. The OOM killer, when the limit
is reached, picks among the program's processes (oom_score_adj 1000, set by the supervisor before the program
runs; the zygote asks for -1000, which needs CAP_SYS_RESOURCE: without it a program that lowers its own score
back to 0 can make the OOM killer take the zygote, whose job is then `infra_error` and which the pool
replaces), and the supervisor reads the cgroup's oom_kill count after each program: a
program whose process was killed for memory and did not pass is `memory`.

Not covered: kernel memory the kernel does not charge to cgroups.
cgroup v2 needs the memory controller enabled for the children of the parent's cgroup (`cgroup.subtree_control`;
true of the root cgroup or a delegated subtree whose processes sit in leaves), else `--check` reports it missing.
"""
from __future__ import annotations

import os

V2_ROOT, V1_ROOT = "/sys/fs/cgroup", "/sys/fs/cgroup/memory"


def parent_dir() -> tuple[str, int] | None:
    """(this process's memory cgroup dir, cgroup version) when we may make cgroups under it, else None."""
    if os.geteuid() != 0:
        return None
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
        with open(f"{V2_ROOT}/cgroup.controllers") as f:
            v2 = "memory" in f.read().split()
    except OSError:
        v2 = False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if v2 and controllers == "":
            d, version = V2_ROOT + path, 2
        elif not v2 and "memory" in controllers.split(","):
            d, version = V1_ROOT + path, 1
        else:
            continue
        return (d.rstrip("/"), version) if os.access(d, os.W_OK) else None
    return None


def create(zygote_pid: int) -> dict | None:
    """Make the zygote's cgroup (in the parent, before the zygote enters its namespaces); None when cgroups
    are not available here. The dict goes to the zygote in its hello."""
    found = parent_dir()
    if found is None:
        return None
    parent, version = found
    _sweep(parent)
    path = f"{parent}/codechat-{zygote_pid}"
    cg = {"path": path, "sup": path + "-sup", "judge": path + "-judge", "version": version}
    try:
        if version == 2:  # the memory controller must be enabled for the parent's children
            with open(f"{parent}/cgroup.subtree_control") as f:
                if "memory" not in f.read().split():
                    return None
        os.mkdir(path)
        os.mkdir(cg["sup"])
        os.mkdir(cg["judge"])
    except OSError:
        remove(cg)
        return None
    return cg


def _sweep(parent: str) -> None:
    """Remove the cgroups of zygotes that are gone without their parent removing them (a killed trainer):
    only those whose zygote pid is not alive (rmdir fails anyway while a process is inside)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith("codechat-")]
    except OSError:
        return
    for name in names:
        pid = name[len("codechat-"):].removesuffix("-sup").removesuffix("-judge")
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or a pid we may not signal): not ours to judge
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.rmdir(os.path.join(parent, name))
        except OSError:
            pass


KEYS = ("path", "sup", "judge")
"""The cgroup dirs of one zygote: its programs', its supervisor's, its judge's."""


def remove(cg: dict | None) -> None:
    """Remove the zygote's cgroups once no process is left in them (the parent, after the zygote exited)."""
    for key in KEYS if cg else ():
        try:
            os.rmdir(cg[key])
        except OSError:
            pass


class Memory:
    """The zygote's open handles on its cgroup (opened before the fresh root hides /sys; close-on-exec)."""

    def __init__(self, cg: dict):
        flags = os.O_CLOEXEC
        p, v = cg["path"], cg["version"]
        self.version = v
        self.procs = os.open(f"{p}/cgroup.procs", os.O_WRONLY | flags)
        self.sup_procs = os.open(f"{cg['sup']}/cgroup.procs", os.O_WRONLY | flags)
        if v == 2:
            self.limit = os.open(f"{p}/memory.max", os.O_WRONLY | flags)
            self.swap = _open_maybe(f"{p}/memory.swap.max", os.O_WRONLY | flags)
            self.events = os.open(f"{p}/memory.events", os.O_RDONLY | flags)
        else:
            self.limit = os.open(f"{p}/memory.limit_in_bytes", os.O_WRONLY | flags)
            self.swap = _open_maybe(f"{p}/memory.memsw.limit_in_bytes", os.O_WRONLY | flags)
            self.events = os.open(f"{p}/memory.oom_control", os.O_RDONLY | flags)
        self.judge_procs, self.judge_limit, self.judge_swap = -1, -1, -1
        j = cg.get("judge")
        if j:
            self.judge_procs = os.open(f"{j}/cgroup.procs", os.O_WRONLY | flags)
            names = ("memory.max", "memory.swap.max") if v == 2 else ("memory.limit_in_bytes",
                                                                        "memory.memsw.limit_in_bytes")
            self.judge_limit = os.open(f"{j}/{names[0]}", os.O_WRONLY | flags)
            self.judge_swap = _open_maybe(f"{j}/{names[1]}", os.O_WRONLY | flags)
        self.current = 1 << 62  # no limit yet (v1: the swap limit may only be set at or above it)
        self.kills = 0

    def join(self) -> None:
        """Move the calling process (the zygote) into the cgroup; its future children start there."""
        os.write(self.procs, b"0")

    def leave(self) -> None:
        """Move the calling process (the supervisor, just forked) to the supervisor's cgroup."""
        os.write(self.sup_procs, b"0")

    def judge_join(self, pid: int, nbytes: int) -> None:
        """Move a new judge (not yet running any job) into the judge's cgroup, limited to `nbytes`, no swap."""
        if self.judge_procs < 0:
            return
        if self.version == 1:  # (v1, lowering from no limit: the memory limit first, memory+swap at or above it)
            for fd in (self.judge_limit, self.judge_swap):
                if fd >= 0:
                    os.write(fd, str(nbytes).encode())
        else:
            os.write(self.judge_limit, str(nbytes).encode())
            if self.judge_swap >= 0:
                os.write(self.judge_swap, b"0")
        os.write(self.judge_procs, str(pid).encode())

    def set_limit(self, nbytes: int) -> None:
        """The limit for the next program (written only when it changes); no swap beyond it."""
        if nbytes == self.current:
            return
        v1_order = [self.swap, self.limit] if nbytes > self.current else [self.limit, self.swap]
        for fd in (v1_order if self.version == 1 else [self.limit]):
            if fd >= 0:
                os.write(fd, str(nbytes).encode())
        if self.version == 2 and self.swap >= 0:
            os.write(self.swap, b"0")
        self.current = nbytes

    def oom_kills(self) -> int:
        """The cgroup's count of processes killed for memory so far."""
        for line in os.pread(self.events, 4096, 0).split(b"\n"):
            if line.startswith(b"oom_kill "):
                return int(line.split()[1])
        return 0

    def new_oom_kill(self) -> bool:
        """Whether a process was killed for memory since the last call (after each program)."""
        n = self.oom_kills()
        seen, self.kills = self.kills, n
        return n > seen


def _open_maybe(path: str, flags: int) -> int:
    try:
        return os.open(path, flags)
    except OSError:
        return -1


def set_oom_score(pid: int | str, value: int) -> None:
    """oom_score_adj of a process (set by root: the process cannot lower it again)."""
    fd = os.open(f"/proc/{pid}/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)
