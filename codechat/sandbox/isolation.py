"""OS-level isolation for sandboxed programs: namespaces, resource limits, an unprivileged uid, reaping.

`enter_namespaces()` runs once in each zygote (before any program is forked). As root: a new network namespace
(no interfaces up, not even loopback: answer programs may open AF_UNIX sockets only, `seccomp.py`), a new mount
namespace whose root is the minimal view of `rootfs.py`
(Python read-only, its own /proc, a private /tmp, nothing else of the host), and per program (made by
`procs.serve_forks` at each fork) a new PID namespace, in which the program is process 1, so that the kernel
kills everything it started when it dies, and a new IPC namespace (SysV objects and POSIX queues die with it).
Every program also runs under a uid of its own (`sandbox_uid()`), which makes RLIMIT_NPROC bite (root ignores
it), keeps the program from signalling or ptracing the root-owned judge, zygote and parent, and from reading
root-only files; and under the seccomp filter of `seccomp.py`.

A repository command (`enter_workspace`: launch.py, each run of the warm test runner) enters a network namespace
of its own per run, with loopback up (`loopback_up`: 127.0.0.1 and ::1) and `/etc/hosts` naming localhost in its
fresh root: test suites that serve on localhost (django's LiveServerTestCase) work, and what one run listens on
(TCP, UDP, abstract unix sockets) is unreachable from every other run, from the host and from the judge, and dies
with the run's last process.

Not root: an unprivileged user namespace gives the network namespace only (the pool's warning says what is
missing), loopback up in it for repository commands; processes that leave their process group are then found
through the zygote's children.
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

from codechat.sandbox import rootfs

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWPID = 0x08000000, 0x20000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
AF_INET, SOCK_DGRAM, SOCK_CLOEXEC = 2, 2, 0o2000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP, IFREQ_SIZE = 0x8913, 0x8914, 0x1, 40  # linux/sockios.h, linux/if.h
SCRATCH_DIRS = ("/tmp", "/dev/shm", "/var/tmp")
PROGRAM_NS = 0  # namespaces made for each program (CLONE_NEWPID | CLONE_NEWIPC) when enter_namespaces could
OWN_PIDNS_FD = -1  # the zygote's own PID namespace, to return to after forking a program into a new one

_libc = ctypes.CDLL(None, use_errno=True)


class Limits:
    """Per-program resource limits (rlimits are per process; nproc is per uid when the uid is our own).
    A plain class, not a dataclass: `dataclasses` imports `inspect`, and the zygote keeps its imports small."""

    def __init__(self, cpu_s: int = 6, memory_mb: int = 1024, nproc: int = 64, nofile: int = 64, fsize_mb: int = 16):
        self.cpu_s, self.memory_mb, self.nproc, self.nofile, self.fsize_mb = cpu_s, memory_mb, nproc, nofile, fsize_mb

    def __repr__(self) -> str:
        return f"Limits({self.__dict__})"


def rmtree(path: str, dir_fd: int | None = None) -> None:
    """shutil.rmtree without importing shutil (which loads bz2/lzma into the zygote), and without recursion:
    a program can build a tree deeper than Python's recursion limit (or than the fd limit), so this walks down
    holding one directory fd at a time and climbs back through "..", keeping only names on a list. Runs after
    every process of the program is dead (nothing moves under it). Never follows a symlink, not even at `path`
    itself: a program can replace its own temp dir by a link to a directory of ours, and this runs as root."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError:  # not a directory, or a symlink (ELOOP): remove the entry itself
        try:
            os.unlink(path, dir_fd=dir_fd)
        except OSError:
            pass
        return
    down: list[tuple[str, set[str]]] = []  # the names walked down from `path`, each with its parent's stuck names
    stuck: set[str] = set()  # subdirectories of the current one that could not be removed
    try:
        while True:
            sub = None
            try:
                with os.scandir(fd) as it:
                    for e in it:
                        if e.is_dir(follow_symlinks=False):
                            if sub is None and e.name not in stuck:
                                sub = e.name
                        else:
                            try:
                                os.unlink(e.name, dir_fd=fd)
                            except OSError:
                                pass
            except OSError:
                pass
            if sub is not None:
                try:
                    child = os.open(sub, flags, dir_fd=fd)
                except OSError:
                    stuck.add(sub)
                    continue
                os.close(fd)
                down.append((sub, stuck))
                fd, stuck = child, set()
                continue
            if not down:
                break
            name, stuck = down.pop()
            try:
                parent = os.open("..", flags, dir_fd=fd)
            except OSError:
                break
            os.close(fd)
            fd = parent
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                stuck.add(name)
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


def loopback_up() -> None:
    """Bring up `lo` in the calling process's network namespace (a fresh one has 127.0.0.1 on it, down; the
    kernel adds ::1 when it comes up). Needs CAP_NET_ADMIN there; no `ip` binary, only an ioctl."""
    fd = _libc.socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "loopback: socket failed")
    try:
        ifr = ctypes.create_string_buffer(b"lo", IFREQ_SIZE)  # struct ifreq: name[16], then ifr_flags (short)
        if _libc.ioctl(fd, SIOCGIFFLAGS, ifr) != 0:
            raise OSError(ctypes.get_errno(), "loopback: SIOCGIFFLAGS on lo failed")
        flags = int.from_bytes(ifr.raw[16:18], sys.byteorder) | IFF_UP
        ifr[16:18] = flags.to_bytes(2, sys.byteorder)
        if _libc.ioctl(fd, SIOCSIFFLAGS, ifr) != 0:
            raise OSError(ctypes.get_errno(), "loopback: SIOCSIFFLAGS on lo failed")
    finally:
        os.close(fd)


def enter_namespaces(hide_paths: tuple[str, ...] = (), binds: tuple[str, ...] = (),
                     loopback: bool = False, user: int | None = None) -> list[str]:
    """Isolate the calling process (a zygote) and its future children. Returns the protections now active.
    As root: a network namespace, a mount namespace with the fresh root of `rootfs.build_root`, and a check that
    PID and IPC namespaces can be made for each program (`procs.serve_forks` makes them; `PROGRAM_NS`).
    `binds`: extra host directories visible read-only inside the fresh root (launch.py: the workspace).
    `loopback`: bring up `lo` in the new network namespace (a repository command, which has that namespace to
    itself); raises OSError if it cannot. Never done without a new network namespace (that `lo` is the host's).
    `user`: the uid the fresh root's /etc/passwd names (a repository command's, `rootfs.build_root`)."""
    global PROGRAM_NS, OWN_PIDNS_FD
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
            if loopback:
                loopback_up()
                active.append("loopback")
        return active
    if _unshare(CLONE_NEWNET):
        active.append("network")
        if loopback:
            loopback_up()
            active.append("loopback")
    if not _unshare(CLONE_NEWNS):
        return active
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rootfs.mount("none", "/", None, MS_REC | MS_PRIVATE)
        rootfs.build_root(package_dir, hide_paths, binds, user)
        active.append("fresh_root")
    except OSError as e:
        print(f"codechat sandbox: no fresh root: {e}", file=sys.stderr)
        return active
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    if _unshare(CLONE_NEWPID | CLONE_NEWIPC) and _libc.setns(own, CLONE_NEWPID) == 0:
        PROGRAM_NS, OWN_PIDNS_FD = CLONE_NEWPID | CLONE_NEWIPC, own
        active += ["pid_namespace", "ipc_namespace"]
    else:
        os.close(own)
    return active


def sandbox_uid(pid: int | None = None) -> int | None:
    """A uid no other live zygote uses (derived from the pid of this zygote, or of the given one), or None when
    not running as root."""
    return 1_000_000 + (os.getpid() if pid is None else pid) if os.geteuid() == 0 else None


def judge_uid(zygote_pid: int) -> int:
    """The judge's uid: above every `sandbox_uid` (pids stay below 2**22), so no program shares it."""
    return 1_000_000 + (1 << 22) + zygote_pid


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


def enter_workspace(ws: str, hide: tuple[str, ...], binds: tuple[str, ...], rlimits) -> None:
    """Enter the sandbox around workspace `ws`: fresh root and namespaces showing `ws` and `binds` (a network
    namespace of this run's own, loopback up; its uid named in /etc/passwd), chdir into it,
    the rlimits, then the uid of its own. The one sequence every launcher runs (launch.py, the warm test runner),
    so the two cannot drift apart."""
    uid = sandbox_uid()
    enter_namespaces(tuple(hide), binds=(ws, *binds), loopback=True, user=uid)
    if not os.path.isdir(ws):
        raise OSError(f"workspace {ws} is not visible inside the sandbox (under a scratch dir or a hidden path?)")
    os.chdir(ws)
    apply_rlimits(rlimits)
    drop_privileges(uid)


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


def clean_scratch(uid: int | None, keep: str = "", remove: bool = True) -> bool:
    """Remove what the uid left in the shared scratch dirs (except `keep`); True if it had written there.
    `remove=False`: only report (with a fresh root the whole /tmp is dropped before the next program)."""
    found = False
    if uid is None:
        return False
    for d in {os.path.realpath(d) for d in SCRATCH_DIRS}:  # (in the fresh root /dev/shm and /var/tmp are /tmp)
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.path != keep and e.stat(follow_symlinks=False).st_uid == uid:
                    found = True
                    if not remove:
                        return True
                    rmtree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)
            except OSError:
                pass
    return found
