"""Repository workspaces: a cheap per-rollout copy of a repo, file access confined to it, and commands run in it
under the sandbox's isolation.

- `Workspace.clone(base, parent)`: a copy of a base tree. As root, files are hard links to the base (a 64-file
  repo clones in about a millisecond) - safe because commands run under an unprivileged uid that cannot write
  root's files, and our own writes replace a file (write a temp file, rename) instead of writing through
  the link. Without root, files are copied.
- `Workspace.read/write/listing/diff`: paths are relative, normalised and checked (`safe_path`); symlinks in
  the tree are never followed (none are created: bases skip them).
- `Trash`: removes finished workspaces on a thread of its own (on a disk mounted with `discard` each rmdir
  waits milliseconds for the device, with no CPU: a judgement need not wait for it).
- `run_isolated(argv, workspace, ...)`: one command under `launch.py` (no network, private /tmp, rlimits, own
  uid, own session), wall-clock deadline, output capped; everything it started is killed afterwards
  (`isolation.reap_uid`). Returns an `ExecResult`.

Protects against: a command writing the workspace or the base, reaching the network, leaving processes
behind, flooding output, running forever. Does not protect against: reading world-readable files outside the
workspace (as for the function sandbox: `hide_paths` covers directories), kernel exploits; without root, the
command runs under our uid (no uid of its own, may write the workspace: copies, never links, are used then).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from codechat import CodechatError
from codechat.sandbox import isolation

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
MAX_PATH_CHARS = 255
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache"}
EXEC_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "TMPDIR": "/tmp"}


class WorkspaceError(CodechatError):
    """A path outside the workspace, a missing file, a bad base: the message names the path."""


@dataclass
class ExecResult:
    """What one isolated command did."""
    status: str
    """`ok` (exited by itself, any exit code), `timeout` (killed at the deadline) or `error` (could not start)."""
    returncode: int | None
    """Exit status (negative: killed by that signal); None on timeout."""
    output: str
    """stdout and stderr interleaved, at most `max_output_bytes` (decoded with replacement)."""
    truncated: bool
    """True when more output was produced than kept."""
    duration_s: float
    """Wall-clock seconds from start to exit (or kill)."""
    channel: bytes = b""
    """With `channel=True`: what the command wrote on its private result pipe (fd given as `{fd}` in argv)."""


def safe_path(path: str) -> str:
    """A workspace-relative path, normalised; raises WorkspaceError for anything that could leave the tree."""
    if not isinstance(path, str) or not path.strip():
        raise WorkspaceError(f"path {path!r}: empty or not a string")
    if "\x00" in path or len(path) > MAX_PATH_CHARS:
        raise WorkspaceError(f"path {path[:60]!r}: contains NUL or is longer than {MAX_PATH_CHARS} characters")
    if path.startswith(("/", "~")) or "\\" in path:
        raise WorkspaceError(f"path {path!r}: must be relative to the repository root, with / separators")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise WorkspaceError(f"path {path!r}: '..' is not allowed")
    return "/".join(parts) or "."


def walk_files(root: Path) -> list[str]:
    """Relative paths of the regular files under root (sorted), skipping symlinks, VCS and cache dirs."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d)))
        rel = os.path.relpath(dirpath, root)
        for f in sorted(filenames):
            full = os.path.join(dirpath, f)
            if os.path.isfile(full) and not os.path.islink(full) and not f.endswith((".pyc", ".pyo")):
                out.append(f if rel == "." else f"{rel}/{f}")
    return out


def write_tree(root: Path, files: dict[str, str | bytes]) -> None:
    """Write {relative path: text (UTF-8) or bytes} under root (paths checked), readable by everyone, writable by
    the owner."""
    for rel, text in files.items():
        p = root / safe_path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8")
    for dirpath, _, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)


def scratch_dir(prefix: str = "codechat-ws-") -> Path:
    """A fresh directory for bases and workspaces, traversable by the sandbox uid, under $CODECHAT_WORKSPACES,
    else /run/codechat as root (not under /tmp: the sandbox covers /tmp with its own), else the temp dir."""
    parent = os.environ.get("CODECHAT_WORKSPACES") or ("/run/codechat" if os.geteuid() == 0 else tempfile.gettempdir())
    os.makedirs(parent, mode=0o755, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(d, 0o755)
    return d


class Workspace:
    """One rollout's copy of a repository; `base` is the pristine tree it was cloned from."""

    def __init__(self, root: Path, base: Path):
        self.root, self.base = Path(root), Path(base)

    @classmethod
    def clone(cls, base: Path, parent: Path, name: str) -> "Workspace":
        base, root = Path(base), Path(parent) / name
        link = os.geteuid() == 0
        root.mkdir(mode=0o755)
        for rel in walk_files(base):
            dst = root / rel
            dst.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            if link:
                os.link(base / rel, dst)
            else:
                shutil.copyfile(base / rel, dst)
        return cls(root, base)

    def _file(self, path: str) -> Path:
        rel = safe_path(path)
        p = self.root
        for part in rel.split("/"):
            p = p / part
            if p.is_symlink():
                raise WorkspaceError(f"path {path!r}: goes through a symlink")
        return p

    def exists(self, path: str) -> bool:
        return self._file(path).is_file()

    def read(self, path: str, max_bytes: int = 1 << 20) -> str:
        p = self._file(path)
        if not p.is_file():
            raise WorkspaceError(f"{path}: no such file")
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise WorkspaceError(f"{path}: larger than {max_bytes} bytes")
        return data.decode("utf-8", errors="replace")

    def write(self, path: str, text: str) -> None:
        """Replace (never write through) the file: a hard link to the base stays untouched."""
        p = self._file(path)
        if p.is_dir():
            raise WorkspaceError(f"{path}: is a directory")
        p.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp = p.parent / f".{p.name}.codechat-tmp"
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)

    def listing(self, path: str = ".") -> list[str]:
        d = self._file(path) if safe_path(path) != "." else self.root
        if not d.is_dir():
            raise WorkspaceError(f"{path}: no such directory")
        prefix = "" if d == self.root else safe_path(path) + "/"
        return [prefix + r for r in walk_files(d)]

    def changes(self) -> dict[str, str | None]:
        """{path: new text, or None if deleted} for every file that differs from the base."""
        out: dict[str, str | None] = {}
        mine, theirs = set(walk_files(self.root)), set(walk_files(self.base))
        for rel in sorted(mine):
            a = self.root / rel
            if rel in theirs:
                b = self.base / rel
                sa, sb = a.stat(), b.stat()
                if (sa.st_ino, sa.st_dev) == (sb.st_ino, sb.st_dev) or a.read_bytes() == b.read_bytes():
                    continue
            out[rel] = a.read_text(encoding="utf-8", errors="replace")
        for rel in sorted(theirs - mine):
            out[rel] = None
        return out

    def remove(self) -> None:
        isolation.rmtree(str(self.root))


class Trash:
    """Workspaces whose commands are all dead, removed one after the other on a thread of its own (started on
    first use); `close()` waits for the last."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queue: list[Path] = []
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    def put(self, ws: Workspace) -> None:
        with self._lock:
            if self._closed:
                ws.remove()
                return
            self._queue.append(ws.root)
            self._wake.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="codechat-trash", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._wake.wait()
                if not self._queue:
                    return
                root = self._queue.pop()
            isolation.rmtree(str(root))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join()


def _launcher_env() -> dict[str, str]:
    paths = [PACKAGE_ROOT] + [p for p in site.getsitepackages() if os.path.isdir(p)]
    return {"PATH": EXEC_ENV["PATH"], "PYTHONPATH": os.pathsep.join(paths), "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1"}


def python_binds() -> list[str]:
    """The interpreter's venv and site-packages dirs: the launcher runs with -S, so its own fresh root would not
    expose them, and the command (`python -I ...`, pytest) needs them. Read-only inside; codechat stays hidden."""
    dirs = [sys.prefix] if sys.prefix != sys.base_prefix else []
    return dirs + [p for p in site.getsitepackages() if os.path.isdir(p)]


def run_isolated(argv: list[str], workspace: Path, timeout_s: float = 10.0, limits: isolation.Limits | None = None,
                 max_output_bytes: int = 16384, hide_paths: tuple[str, ...] = (), channel: bool = False,
                 max_channel_bytes: int = 16 << 20, stdin: bytes = b"", binds: tuple[str, ...] = ()) -> ExecResult:
    """Run argv (argv[0] an absolute path) with cwd = workspace under isolation; see the module docstring.
    channel: open a pipe whose write end the command gets as fd 3 (`{fd}` in argv becomes 3), as in a warm run.
    binds: more host directories visible read-only inside (a test environment's venv)."""
    limits = limits or isolation.Limits(cpu_s=int(timeout_s) + 1, memory_mb=1024, nproc=64, nofile=256)
    chan_r, chan_w = os.pipe() if channel else (-1, -1)
    argv = [a.replace("{fd}", "3") for a in argv]  # launch.py moves the pipe to fd 3 before the exec
    spec = {"workspace": str(Path(workspace).resolve()), "rlimits": isolation.rlimits(limits),
            "hide": list(hide_paths), "argv": argv, "env": EXEC_ENV, "binds": python_binds() + list(binds),
            "channel": chan_w}
    start = time.monotonic()
    try:
        proc = subprocess.Popen([sys.executable, "-S", "-m", "codechat.sandbox.launch", json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=_launcher_env(), cwd="/", start_new_session=True,
                                pass_fds=(chan_w,) if channel else ())
    except OSError as e:
        for fd in (chan_r, chan_w):
            if fd >= 0:
                os.close(fd)
        return ExecResult("error", None, f"could not start: {e}", False, 0.0)
    if channel:
        os.close(chan_w)
    uid = 1_000_000 + proc.pid if os.geteuid() == 0 else None  # = isolation.sandbox_uid() in the launcher
    try:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except OSError:  # BrokenPipe: the command exited without reading
            pass
        kept, truncated, timed_out, chan = _read_capped(proc.stdout.fileno(), chan_r, start + timeout_s,
                                                        max_output_bytes, max_channel_bytes)
        if not timed_out:
            try:
                proc.wait(timeout=max(0.0, start + timeout_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        isolation.reap_uid(uid, proc.pid)
        proc.stdout.close()
        if channel:
            os.close(chan_r)
        proc.wait()
    text = kept.decode("utf-8", errors="replace")
    if timed_out:
        return ExecResult("timeout", None, text, truncated, time.monotonic() - start, chan)
    return ExecResult("ok", proc.returncode, text, truncated, time.monotonic() - start, chan)


def _read_capped(out_fd: int, chan_fd: int, deadline: float, cap: int, chan_cap: int
                 ) -> tuple[bytes, bool, bool, bytes]:
    """Read output (and the channel) until both reach EOF or the deadline; keep the first `cap` bytes of output
    (the rest is drained) and at most `chan_cap` of the channel. Returns (output, truncated, timed_out, channel)."""
    kept, chan, truncated = bytearray(), bytearray(), False
    open_fds = [fd for fd in (out_fd, chan_fd) if fd >= 0]
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(kept), truncated, True, bytes(chan)
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
            elif fd == out_fd:
                truncated |= len(chunk) > cap - len(kept)
                kept += chunk[:max(0, cap - len(kept))]
            else:
                chan += chunk[:max(0, chan_cap - len(chan))]
    return bytes(kept), truncated, False, bytes(chan)
