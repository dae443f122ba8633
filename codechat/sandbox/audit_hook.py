"""The program's audit hook: reports, once each, the first time the program touches the network, starts a
process, sends a signal, loads native code, or writes outside its working directory (Verdict.blocked).

Installed by the candidate before the program runs; it observes, the OS enforces. Its reports go over the
events pipe and the supervisor keeps only the kinds in `EVENT_KINDS`.
"""
from __future__ import annotations

import os
import sys

EVENTS = {
    "socket.connect": "network", "socket.bind": "network", "socket.sendto": "network",
    "socket.getaddrinfo": "network", "subprocess.Popen": "subprocess", "os.system": "subprocess",
    "os.exec": "subprocess", "os.posix_spawn": "subprocess", "os.spawn": "subprocess", "os.fork": "subprocess",
    "os.forkpty": "subprocess", "os.kill": "signal", "os.killpg": "signal", "signal.pthread_kill": "signal",
    "ctypes.dlopen": "ctypes", "ctypes.dlsym": "ctypes",
}
WRITE_EVENTS = {"open", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
                "os.link", "os.truncate", "shutil.rmtree"}
EVENT_KINDS = frozenset(EVENTS.values()) | {"write_outside"}
"""The closed set of event kinds the supervisor accepts from a program's events pipe (anything else: dropped)."""
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def install(events_fd: int, cwd: str) -> None:
    seen: set[str] = set()

    def report(kind: str) -> None:
        if kind not in seen:
            seen.add(kind)
            try:
                os.write(events_fd, kind.encode() + b"\n")
            except OSError:
                pass

    def hook(event: str, args: tuple) -> None:
        kind = EVENTS.get(event)
        if kind is not None:
            report(kind)
        elif event in WRITE_EVENTS and args:
            if event == "open":
                path, mode, flags = (tuple(args) + (None, None))[:3]
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                          (isinstance(flags, int) and flags & _WRITE_FLAGS and mode is None)
                if not writing:
                    return
            else:
                path = args[0]
            if isinstance(path, (str, bytes)):
                p = os.path.abspath(os.fsdecode(path))
                if not (p == cwd or p.startswith(cwd + os.sep) or p.startswith("/dev/null")):
                    report("write_outside")

    sys.addaudithook(hook)
