"""Shared by the sandbox tests: a probe program's runner, what it lists of its own /tmp, and the processes a run
left behind."""
from __future__ import annotations

import os

import pytest

from codechat.tasks import Task

ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not ROOT, reason="namespaces and mounts need root here")
T = Task("probe", "", ["assert probe() == 'ok'"], "probe")

CARRIED = ("{line.split()[4].split('/')[2] for line in open('/proc/self/mountinfo')"
           " if line.split()[4].startswith('/tmp/')}")
"""A program's expression for the names in its /tmp that the sandbox binds there: the top directory of a Python
or codechat under the host's /tmp (a checkout cloned into /tmp), none otherwise (sandbox/rootfs.py)."""
OWN_TMP = f"sorted(n for n in os.listdir('/tmp') if n not in {CARRIED})"
"""A program's expression for the names in its /tmp besides those bindings: its own temp dir alone when /tmp
is fresh."""


def run(v, body: str, head: str = "", task: Task = T):
    """Verify a `probe()` whose body is `body` (os, sys, ctypes, signal and time imported; `head` above it)."""
    code = "import os, sys, ctypes, signal, time\n" + head + "\ndef probe():\n" + \
        "".join(f"    {ln}\n" for ln in body.splitlines())
    return v.verify(task, code)


def alive_with_uid(uid: int) -> list[str]:
    """PIDs of the live (not zombie) processes owned by uid: what a run left behind."""
    left = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and os.stat(f"/proc/{p}").st_uid == uid and open(f"/proc/{p}/stat").read().split()[2] != "Z":
                left.append(p)
        except OSError:
            pass
    return left
