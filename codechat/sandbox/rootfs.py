"""A minimal filesystem view for sandboxed programs: a fresh root holding only what Python needs to run.

`build_root()` runs once in each zygote, as root, inside its new mount namespace (`isolation.enter_namespaces`),
before any program is forked; the zygote, its supervisor, its judge and every program then live in this root:
  /usr, /lib*, /bin, /sbin       read-only binds of the host's (symlinks where the host has symlinks)
  Python prefixes, sys.path dirs read-only binds at their own paths (stdlib, lib-dynload, site-packages)
  <codechat>/sandbox             read-only: the only part of codechat there (the candidate's and the judge's code);
                                 codechat/tasks (reference solutions), the checkout, task files are absent
  /etc/ld.so.cache               read-only (library lookup)
  /etc/texmf, /var/lib/texmf     only for a repository command, read-only where the host has them: TeX Live's
                                 configuration, formats and file databases, which its tree under /usr links to
  /etc/hosts, /etc/nsswitch.conf written here: localhost is 127.0.0.1 and ::1, looked up in the hosts file only
                                 (`HOSTS`). Loopback is up only for repository commands, each in a network
                                 namespace of its own (`isolation.enter_workspace`)
  /etc/passwd, /etc/group        only for a repository command (`user`): root and the command's uid, named
                                 `codechat` (test suites ask for the user's name: django's createsuperuser tests
                                 loop forever without one); nothing else of /etc
  /dev/null, zero, full, random, urandom   the host's nodes; /dev/fd and stdio links; /dev/shm -> /tmp
  /proc                          a new proc instance, hidepid=invisible: a program sees only the processes of
                                 its own uid. Every system-wide entry is covered (`cover_proc`): files by an
                                 empty root-only file, dirs by an empty root-only dir (/proc/sys, kallsyms,
                                 stat, loadavg, ...: reading one is EACCES), except `meminfo`, a fixed text
                                 (`MEMINFO`: the host's total, all of it free) that psutil and dask read at
                                 import; no figure in it moves, so it carries nothing between programs
  /tmp                           a fresh tmpfs per program (mode 1777; /var/tmp and /dev/shm -> /tmp), holding
                                 the program's temp dir (`fresh_tmp`): no file, inode number or free-space count
                                 of one program's /tmp reaches the next. A Python or codechat under the host's
                                 /tmp (a clone in /tmp) is bound at its own path there, so its top directory is
                                 listed too (read-only; `tmp_mounts`)
Everything else of the host (/etc, /home, /root, /run, /var, /work, caches with tokens) does not exist there.
The root itself is a read-only tmpfs. Built with pivot_root; the old root is detached.

Simplifications: binds are not recursive (a mount below an exposed dir is not visible; one below /usr would be
missing); a hide path under an exposed dir is covered by an empty tmpfs. Python's own executable is not run
from inside (no subprocess `python`), so the venv's bin/ is not exposed.
"""
from __future__ import annotations

import ctypes
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x2000, 0x4000, 0x40000
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
TEX_DIRS = ("/etc/texmf", "/var/lib/texmf")
"""TeX Live's configuration and generated files outside /usr (Debian: the formats, file databases and font maps
that /usr's TeX tree links to): exposed read-only to repository commands, whose test suites run `xelatex`."""
DEVICES = ("null", "zero", "full", "random", "urandom")
VISIBLE_PACKAGES = ("sandbox",)  # subpackages of codechat visible inside (the candidate and judge import them)
TMP_OPTS = "mode=1777,size=256m,nr_inodes=16384"
STAGE = "/.tmp-next"  # where the next program's /tmp is made before it is moved onto /tmp (`fresh_tmp`)
PARKED = "/.tmp-old/tmp"  # where the last program's /tmp waits to be unmounted: below a dir only root may enter
HOSTS = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
NSSWITCH = "hosts: files\npasswd: files\ngroup: files\n"  # (glibc without it asks DNS first for every name)
USER_NAME = "codechat"
PROC_COVERS = "/.proc-covers"  # what covers /proc's system-wide entries: below a dir only root may enter
MEMINFO = ("MemTotal MemFree MemAvailable Buffers:0 Cached:0 SwapCached:0 Active:0 Inactive:0 Active(anon):0 "
           "Inactive(anon):0 Active(file):0 Inactive(file):0 Unevictable:0 Mlocked:0 SwapTotal:0 SwapFree:0 "
           "Dirty:0 Writeback:0 AnonPages:0 Mapped:0 Shmem:0 KReclaimable:0 Slab:0 SReclaimable:0 SUnreclaim:0 "
           "KernelStack:0 PageTables:0 CommitLimit CommittedAS:0 VmallocTotal:0 VmallocUsed:0 VmallocChunk:0")
"""/proc/meminfo's fields inside: MemTotal, MemFree, MemAvailable and CommitLimit the host's total (read once,
when the root is built), every other field 0 (kB): a static text, the same for every program."""
PARK_MAX_USED = 4 << 20  # a /tmp holding more than this is unmounted at once (its pages would count against
# the next program's memory cgroup until then)

_libc = ctypes.CDLL(None, use_errno=True)


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
                   ctypes.c_ulong(flags), data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")


def umount(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def _under(p: str, d: str) -> bool:
    return d == "/" or p == d or p.startswith(d.rstrip("/") + "/")


def python_paths(package_root: str) -> list[str]:
    """Host dirs the Python in this process imports from (prefixes and sys.path), outermost only.
    The package root of codechat itself is left out unless it is a site-packages dir: it is a checkout."""
    found = {sys.base_prefix, sys.prefix, sys.exec_prefix}
    for p in sys.path:
        if p and os.path.isabs(p) and os.path.exists(p):
            found.add(os.path.realpath(p) if os.path.isdir(p) else os.path.dirname(os.path.realpath(p)))
    keep = [p for p in found if p != "/" and os.path.isdir(p)
            and (p != package_root or os.path.basename(p) in ("site-packages", "dist-packages"))]
    keep = [p for p in keep if not any(q != p and _under(p, q) for q in keep)]
    return sorted(p for p in keep if not any(_under(p, d) for d in SYSTEM_DIRS))


def python_links(extra: tuple[str, ...] = ()) -> list[str]:
    """Symlinked directories on the way to the interpreter and its import dirs (`.venv -> /elsewhere/venv`, a
    clone sharing a venv): exposed dirs are bound at their resolved paths, so these links are recreated inside
    the root, or `sys.executable` and the unresolved sys.path entries would not exist there."""
    paths = [sys.prefix, sys.exec_prefix, os.path.dirname(sys.executable), *sys.path, *extra]
    links = set()
    for p in paths:
        if not (p and os.path.isabs(p)):
            continue
        parts = os.path.normpath(p).split("/")[1:]
        for i in range(1, len(parts) + 1):
            q = "/" + "/".join(parts[:i])
            if os.path.islink(q):
                links.add(q)
    return sorted(links)


def _bind(src_fd: int, target: str, readonly: bool) -> None:
    mount(f"/proc/self/fd/{src_fd}", target, None, MS_BIND)
    if readonly:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _make_target(root: str, path: str, is_dir: bool) -> str:
    target = root + path
    os.makedirs(target if is_dir else os.path.dirname(target), mode=0o755, exist_ok=True)
    if not is_dir and not os.path.exists(target):
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    return target


def _dedupe(plan: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    """The plan with each host path once (the first entry wins: an environment's venv or site-packages is
    both an import dir and a requested bind)."""
    seen, out = set(), []
    for entry in plan:
        if entry[0] not in seen:
            seen.add(entry[0])
            out.append(entry)
    return out


def build_root(package_dir: str, hide_paths: tuple[str, ...] = (), binds: tuple[str, ...] = (),
               user: int | None = None) -> list[str]:
    """Replace this process's root by the minimal view (see the module docstring); returns the exposed dirs.
    Needs root in a private mount namespace. `package_dir` is the directory of the `codechat` package.
    `binds`: extra host directories exposed read-only at their own paths (a repository workspace).
    `user`: a uid to name in /etc/passwd and /etc/group (a repository command's own)."""
    package_root = os.path.dirname(package_dir)
    exposed = python_paths(package_root)
    visible = exposed + [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    plan: list[tuple[str, str, bool]] = []  # (host path, kind, read-only): kind dir / file / link
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            plan.append((d, "link", True))
        elif os.path.isdir(d):
            plan.append((d, "dir", True))
    plan += [(p, "dir", True) for p in exposed]
    sandbox_dirs = [os.path.join(package_dir, s) for s in VISIBLE_PACKAGES]
    plan += [(p, "dir", True) for p in sandbox_dirs if not any(_under(p, e) for e in visible)]
    plan += [(os.path.realpath(b), "dir", True) for b in binds]
    if user is not None:
        plan += [(d, "dir", True) for d in TEX_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    planned = {p for p, _, _ in plan}
    plan += [(q, "link", True) for q in python_links(binds)
             if q not in planned and not any(_under(q, v) for v in visible)]
    if os.path.isfile("/etc/ld.so.cache"):
        plan.append(("/etc/ld.so.cache", "file", True))
    plan += [(f"/dev/{n}", "file", False) for n in DEVICES if os.path.exists(f"/dev/{n}")]
    # codechat packages inside an exposed dir (an installed copy) are covered, then its sandbox re-exposed
    covers = [os.path.realpath(h) for h in hide_paths if os.path.isdir(h)]
    covers += [package_dir] + [os.path.join(e, "codechat") for e in exposed]
    covers = sorted({c for c in covers if os.path.isdir(c) and any(_under(c, e) for e in visible)}, key=len)
    plan = _dedupe(plan)
    # one O_PATH handle per host path, every one closed below: a process that never execs (the warm test
    # runner's forks) would otherwise keep a handle taken before pivot_root, and `..` from it is the host's /
    handles: dict[str, int] = {}
    try:
        for p in [p for p, kind, _ in plan if kind != "link"] + sandbox_dirs:
            if p not in handles:
                handles[p] = os.open(p, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        for fd in handles.values():
            os.close(fd)
        raise
    targets = {p: os.readlink(p) for p, kind, _ in plan if kind == "link"}  # read now: /tmp is covered next
    root = "/tmp"  # any existing dir serves as the mount point: every host path is reached through `handles`
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m,nr_inodes=4096")
    try:
        for d in ("proc", "tmp", "dev", "var", STAGE[1:]):
            os.mkdir(f"{root}/{d}", 0o755)
        os.mkdir(root + os.path.dirname(PARKED), 0o700)
        os.mkdir(root + PARKED, 0o755)
        # /tmp first: a Python or codechat under the host's /tmp (a clone, a venv) is bound inside it
        mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, TMP_OPTS)
        for p, kind, ro in plan:
            if kind == "link":
                os.makedirs(os.path.dirname(root + p), mode=0o755, exist_ok=True)
                os.symlink(targets[p], root + p)
            else:
                _bind(handles[p], _make_target(root, p, kind == "dir"), ro)
        for c in covers:
            mount("tmpfs", root + c, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k,nr_inodes=64")
            for s in sandbox_dirs:
                if _under(s, c):
                    _bind(handles[s], _make_target(root, s, True), True)
            mount(None, root + c, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=64")
        for link, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("shm", "/tmp")):
            os.symlink(to, f"{root}/dev/{link}")
        os.symlink("/tmp", f"{root}/var/tmp")
        os.makedirs(f"{root}/etc", mode=0o755, exist_ok=True)
        etc = [("hosts", HOSTS), ("nsswitch.conf", NSSWITCH)]
        if user is not None:
            etc += [("passwd", f"root:x:0:0:root:/root:/bin/sh\n{USER_NAME}:x:{user}:{user}::/tmp:/bin/sh\n"),
                    ("group", f"root:x:0:\n{USER_NAME}:x:{user}:\n")]
        for name, text in etc:
            with open(f"{root}/etc/{name}", "x") as f:
                f.write(text)
        mount_proc(f"{root}/proc", root + PROC_COVERS)
    finally:
        for fd in handles.values():
            os.close(fd)
    os.chdir(root)
    if _libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    umount(".")  # the old root, stacked on the new one by pivot_root(".", ".")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096")
    return exposed


def meminfo_text(total_kb: int) -> str:
    """The fixed /proc/meminfo of the sandbox (`MEMINFO`), in the kernel's layout."""
    lines = []
    for field in MEMINFO.split():
        name, _, value = field.partition(":")
        name = "Committed_AS" if name == "CommittedAS" else name
        lines.append(f"{name + ':':<16}{total_kb if not value else int(value):>8} kB")
    return "\n".join(lines) + "\n"


def host_mem_total_kb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024


def cover_proc(proc: str, covers: str) -> None:
    """Cover every system-wide entry of the full proc instance at `proc` (all but the process dirs and the
    links into them: self, thread-self, mounts, net): files by an empty file and dirs by an empty dir, both
    read-only and mode 0 (only root, which no program is, may open them), and `meminfo` by `meminfo_text`. The
    entries are listed when the root is built; covers are mounts of this namespace, which a program (no
    CAP_SYS_ADMIN, seccomp) cannot remove. `covers` (made here, mode 0700) holds the covering files."""
    os.mkdir(covers, 0o700)
    with open(f"{covers}/meminfo", "x") as f:
        f.write(meminfo_text(host_mem_total_kb()))
    os.chmod(f"{covers}/meminfo", 0o444)
    os.close(os.open(f"{covers}/file", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0))
    os.mkdir(f"{covers}/dir", 0)
    for name in sorted(os.listdir(proc)):
        path = f"{proc}/{name}"
        if name.isdigit() or os.path.islink(path):  # a process, or a link into one (self, mounts -> self/mounts)
            continue
        src = f"{covers}/meminfo" if name == "meminfo" else f"{covers}/dir" if os.path.isdir(path) else \
            f"{covers}/file"
        mount(src, path, None, MS_BIND)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def mount_proc(target: str, covers: str) -> str:
    """A new proc instance at `target` for the programs: the full one with its system-wide entries covered
    (`cover_proc`), "full"; where a cover cannot be mounted, the processes-only instance (`subset=pid`: no
    system-wide entry at all, no meminfo either), "pids". Never a full instance left uncovered."""
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    mount("proc", target, "proc", flags, "hidepid=invisible")
    try:
        cover_proc(target, covers)
        return "full"
    except OSError:
        umount(target)  # (detaches the covers made so far with it)
        mount("proc", target, "proc", flags, "hidepid=invisible,subset=pid")
        return "pids"


def tmp_mounts() -> list[str]:
    """Mount points directly under /tmp in this root (a Python or codechat under the host's /tmp is bound there:
    `build_root`); `fresh_tmp` carries them over to each new /tmp."""
    found = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            point = line.split()[4].decode()
            if point.startswith("/tmp/"):
                found.append(point)
    return [p for p in found if not any(q != p and _under(p, q) for q in found)]


def fresh_tmp(temp_dir: str | None, uid: int | None, carried: list[str], opts: str = TMP_OPTS,
              drop=None) -> None:
    """Replace /tmp by a new, empty tmpfs holding only `temp_dir` (owned by `uid`) and the `carried` mounts
    (`tmp_mounts`, bound recursively: read-only stays read-only), and drop the old one whole. A new tmpfs is a
    new superblock: its inode numbers, free space and directory contents start over for every program, and
    nothing a program built in /tmp (deep trees, links, millions of names) is ever walked.
    Runs after every process of the previous program is gone; made aside (`STAGE`) and moved in.
    `drop`: called once the old /tmp is moved to `PARKED` (out of every program's reach), to unmount it off
    this thread (`tmp_drop.Dropper`): an unmount waits an RCU grace period, milliseconds per program. A /tmp
    holding more than `PARK_MAX_USED` is unmounted here, so its memory is free before the next program runs."""
    mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, opts)
    for p in carried:
        target = STAGE + p[len("/tmp"):]
        os.makedirs(target, mode=0o755, exist_ok=True)
        mount(p, target, None, MS_BIND | MS_REC)
    if drop is not None and _used("/tmp") <= PARK_MAX_USED:
        mount("/tmp", PARKED, None, MS_MOVE)
        mount(STAGE, "/tmp", None, MS_MOVE)
        drop()
    else:
        umount("/tmp")
        mount(STAGE, "/tmp", None, MS_MOVE)
    if temp_dir is None:  # (the judge's own /tmp, in its own mount namespace)
        return
    os.mkdir(temp_dir, 0o700)
    if uid is not None:
        os.chown(temp_dir, uid, uid)


def _used(path: str) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def drop_parked() -> None:
    """Unmount every /tmp parked in this mount namespace (see `fresh_tmp`), here and now."""
    while os.path.ismount(PARKED):
        umount(PARKED)
