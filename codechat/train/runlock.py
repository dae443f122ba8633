"""One run at a time in a run directory: an exclusive lock on `RUN/.lock` that records the holder's pid.

    lock = RunLock.acquire(run_dir)   # CodechatError naming the holder's pid when a live run holds it
    ...                               # train: rank 0 holds it from before the inputs load until the run ends
    lock.release()                    # the lock file is removed; the directories the lock created that nothing
                                      # else filled (a failed start) are removed with it

Protects against: two `codechat train` writing into one run directory at once (a second run, a `--force` or a
`--resume` into a live run), where metrics lose lines, rollouts double and the checkpoints of both mix. The lock
is `flock(2)` on an open file, so the kernel releases it with its process however that ends (SIGKILL, OOM): a
lock file left by a dead process is stale, and the next run takes it over with a message naming the old pid.
Does not protect against: writers other than `codechat train`, or two machines sharing the directory over a
network file system whose flock is local to each machine.
"""
from __future__ import annotations

import errno
import fcntl
import os
import sys
from pathlib import Path

from codechat import CodechatError

LOCK_NAME = ".lock"
"""The lock file in a run directory (holds the pid of the run that holds the lock)."""


_HELD: set[int] = set()
"""The lock fds this process holds: a forked child (a sandbox worker) closes its copies, so a child that outlives
a killed run cannot keep the directory locked (flock belongs to the open file, which fork shares)."""


def _close_inherited() -> None:
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited)


def _read_pid(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


class RunLock:
    """An acquired run-directory lock (see the module docstring)."""

    def __init__(self, run_dir: Path, fd: int, created: list[Path]):
        self.run_dir, self.fd = run_dir, fd
        self.created = created
        """The directories acquire made, run_dir first (removed again by release while empty)."""

    @property
    def path(self) -> Path:
        return self.run_dir / LOCK_NAME

    @classmethod
    def acquire(cls, run_dir: str | Path) -> "RunLock":
        """Lock `run_dir` (created when missing) for this process; refused while another live run holds it."""
        run_dir = Path(run_dir)
        created = [d for d in (run_dir, *run_dir.parents) if not d.exists()]
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CodechatError(f"run_dir: cannot create {run_dir} ({e.strerror or e})") from None
        path = run_dir / LOCK_NAME
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise CodechatError(f"run_dir: cannot write in {run_dir} ({e.strerror or e})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _read_pid(fd) if e.errno in (errno.EAGAIN, errno.EACCES) else None
                os.close(fd)
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise CodechatError(f"{path}: cannot lock the run directory ({e.strerror})") from None
                who = f"pid {holder}" if holder else "another process"
                raise CodechatError(f"{run_dir}: a run is in progress there ({who} holds {LOCK_NAME}); wait for "
                                    f"it to end or stop it, or pick another run_dir") from None
            try:  # the holder before us may have removed the file between our open and flock: lock the new one
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)
        stale = _read_pid(fd)
        if stale is not None and stale != os.getpid():
            print(f"{run_dir}: taking over the run directory from pid {stale}, which stopped without releasing "
                  f"{LOCK_NAME}", file=sys.stderr, flush=True)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD.add(fd)
        return cls(run_dir, fd, created)

    def release(self) -> None:
        """Remove the lock file and unlock; the directories this lock created that are empty again are removed."""
        if self.fd < 0:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still locked: the next run locks a fresh file
        except OSError:
            pass
        _HELD.discard(self.fd)
        os.close(self.fd)
        self.fd = -1
        for d in self.created:  # only while empty: a start that failed before writing anything leaves nothing
            try:
                d.rmdir()
            except OSError:
                break
