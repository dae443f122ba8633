"""OS-level isolation for sandboxed programs: namespaces, mounts, resource limits, an unprivileged uid, reaping.

`enter_namespaces()` runs once in each zygote (before any program is forked): a new network namespace (no
interfaces up, not even loopback) and a new mount namespace in which /tmp, /dev/shm and /var/tmp are fresh
private tmpfs mounts (a Python or codechat installed under one of them is mounted back at its path: a clone
in /tmp works) and each `hide_paths` entry is covered by an empty tmpfs. When running as root, every
program also runs under a uid of its own (`sandbox_uid()`), which makes RLIMIT_NPROC bite (root ignores it),
keeps the program from signalling or ptracing the root-owned judge, zygote and parent, and from reading
root-only files. Directories on the Python prefix that the uid could not traverse (e.g. /root, mode 0700)
are re-exposed read-only through bind mounts so the standard library still imports.

Simplifications: no seccomp filter and no PID namespace; processes that leave their process group are
still killed because everything running under the program's uid is killed (`reap_uid`).
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_BIND, MS_REMOUNT, MS_REC, MS_PRIVATE = 0x1, 0x1000, 0x20, 0x4000, 0x40000
SCRATCH_DIRS = ("/tmp", "/dev/shm", "/var/tmp")

_libc = ctypes.CDLL(None, use_errno=True)


class Limits:
    """Per-program resource limits (rlimits are per process; nproc is per uid when the uid is our own).
    A plain class, not a dataclass: `dataclasses` imports `inspect`, and the zygote keeps its imports small."""

    def __init__(self, cpu_s: int = 6, memory_mb: int = 1024, nproc: int = 64, nofile: int = 64, fsize_mb: int = 16):
        self.cpu_s, self.memory_mb, self.nproc, self.nofile, self.fsize_mb = cpu_s, memory_mb, nproc, nofile, fsize_mb

    def __repr__(self) -> str:
        return f"Limits({self.__dict__})"


def rmtree(path: str, dir_fd: int | None = None) -> None:
    """shutil.rmtree without importing shutil (which loads bz2/lzma into the zygote). Never follows a symlink,
    not even at `path` itself: a program can replace its own temp dir by a link to a directory of ours, and
    this runs as root. Each directory is opened with O_NOFOLLOW and emptied through its fd."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError:  # not a directory, or a symlink (ELOOP): remove the entry itself
        try:
            os.unlink(path, dir_fd=dir_fd)
        except OSError:
            pass
        return
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for name, is_dir in entries:
            try:
                if is_dir:
                    rmtree(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        os.rmdir(path, dir_fd=dir_fd)
    except OSError:
        pass


def _unshare(flags: int) -> bool:
    if _libc.unshare(flags) == 0:
        return True
    return False


def _mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(src.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")


def _untraversable_ancestor(path: str) -> str | None:
    """The highest ancestor of `path` that 'other' cannot traverse (needs o+x), if any."""
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        d = os.sep.join(parts[:i]) or os.sep
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return d
        except OSError:
            return None
    return None


def enter_namespaces(hide_paths: tuple[str, ...] = ()) -> list[str]:
    """Isolate the calling process (a zygote) and its future children. Returns the protections now active."""
    active: list[str] = []
    if os.geteuid() != 0:
        # unprivileged user namespaces: we become "root" inside, which allows a network namespace
        uid, gid = os.getuid(), os.getgid()
        if _unshare(CLONE_NEWUSER | CLONE_NEWNET):
            try:
                with open("/proc/self/setgroups", "w") as f:
                    f.write("deny")
                with open("/proc/self/uid_map", "w") as f:
                    f.write(f"0 {uid} 1")
                with open("/proc/self/gid_map", "w") as f:
                    f.write(f"0 {gid} 1")
            except OSError:
                pass
            active.append("network")
        return active
    if _unshare(CLONE_NEWNET):
        active.append("network")
    if not _unshare(CLONE_NEWNS):
        return active
    try:
        _mount("none", "/", None, MS_REC | MS_PRIVATE)
        prefixes = sorted({p for p in (sys.base_prefix, sys.prefix, sys.exec_prefix) if os.path.isdir(p)})
        # Python or codechat itself under /tmp (a clone or venv there): keep a handle on it, cover the scratch
        # dirs, then mount it back at its path through the handle (the path alone is gone under the tmpfs).
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        in_scratch = sorted({p for p in prefixes + [package_root]
                             if any(p.startswith(d + os.sep) for d in SCRATCH_DIRS)})
        in_scratch = [p for p in in_scratch if not any(p.startswith(q + os.sep) for q in in_scratch)]
        handles = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in in_scratch]
        for d in SCRATCH_DIRS:
            if os.path.isdir(d):
                _mount("tmpfs", d, "tmpfs", 0, "mode=1777,size=256m")
        for p, fd in handles:
            os.makedirs(p, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
            os.close(fd)
        # Python prefixes behind a directory the sandbox uid cannot traverse: stage, cover, re-expose.
        covers = {a for p in prefixes if (a := _untraversable_ancestor(p))}
        covers |= {os.path.abspath(os.path.expanduser(h)) for h in hide_paths if os.path.isdir(os.path.expanduser(h))}
        exposed = [p for p in prefixes if any(p.startswith(c + os.sep) for c in covers)]
        staged = []
        for i, p in enumerate(exposed):
            stage = f"/tmp/.sandbox-python-{i}"
            os.makedirs(stage, exist_ok=True)
            _mount(p, stage, None, MS_BIND | MS_REC)
            staged.append((stage, p))
        for c in sorted(covers, key=len):
            _mount("tmpfs", c, "tmpfs", 0, "mode=0755,size=1m")
        for stage, p in staged:
            os.makedirs(p, exist_ok=True)
            _mount(stage, p, None, MS_BIND | MS_REC)
        active += ["private_tmp", "hidden_paths"]
    except OSError as e:
        print(f"codechat sandbox: mount isolation incomplete: {e}", file=sys.stderr)
    return active


def sandbox_uid() -> int | None:
    """A uid no other live zygote uses (derived from this zygote's pid), or None when not running as root."""
    return 1_000_000 + os.getpid() if os.geteuid() == 0 else None


def rlimits(lim: Limits) -> list[int]:
    """The program's rlimits as a flat list (resource, soft, hard, resource, ...), computed by the supervisor so
    that the forked child only has to apply them (`apply_rlimits`)."""
    mib = 1 << 20
    return [resource.RLIMIT_CPU, lim.cpu_s, lim.cpu_s + 1,
            resource.RLIMIT_AS, lim.memory_mb * mib, lim.memory_mb * mib,
            resource.RLIMIT_FSIZE, lim.fsize_mb * mib, lim.fsize_mb * mib,
            resource.RLIMIT_NOFILE, lim.nofile, lim.nofile,
            resource.RLIMIT_CORE, 0, 0,
            resource.RLIMIT_NPROC, lim.nproc, lim.nproc]


N_RLIMITS = 6


def apply_rlimits(flat) -> None:
    setrlimit = resource.setrlimit
    for i in range(0, 3 * N_RLIMITS, 3):
        setrlimit(flat[i], (flat[i + 1], flat[i + 2]))


def apply_limits(lim: Limits) -> None:
    apply_rlimits(rlimits(lim))


def drop_privileges(uid: int | None) -> None:
    if uid is None:
        return
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def reap_uid(uid: int | None, pgid: int) -> None:
    """Kill every process of the program: its process group, then (as root) everything running as its uid.

    kill(-1) sent *as the uid* reaches exactly the processes that uid owns, including ones that called setsid()
    to leave the group. It is repeated until nothing is left, so a fork bomb racing the kill still ends.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    if uid is None:
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            # zombies (killed, not yet reaped) still count as found, so a fixed number of passes, not "until none"
            for _ in range(20):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def clean_scratch(uid: int | None, keep: str = "") -> bool:
    """Remove what the uid left in the shared scratch dirs (except `keep`); True if it had written there."""
    found = False
    if uid is None:
        return False
    for d in SCRATCH_DIRS:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.path != keep and e.stat(follow_symlinks=False).st_uid == uid:
                    found = True
                    rmtree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)
            except OSError:
                pass
    return found
