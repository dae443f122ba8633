"""Attacks on what programs share with each other and with the host: counters, memory, the judge's privileges.

Each test runs programs one after the other on one worker (the case where two could cooperate), or attacks the
judge through a test that evaluates what the program returned.
"""
from __future__ import annotations

import os

import pytest

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not ROOT, reason="namespaces and mounts need root here")
T = Task("probe", "", ["assert probe() == 'ok'"], "probe")


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=1, timeout_s=10, memory_mb=512, nproc=32)) as v:
        yield v


def run(v, body: str, head: str = "", task: Task = T):
    code = "import os, sys, ctypes, signal, time\n" + head + "\ndef probe():\n" + \
        "".join(f"    {ln}\n" for ln in body.splitlines())
    return v.verify(task, code)


def reported(verdict) -> str:
    """What a probe program reported through its exception's message (without the "test N: " prefix)."""
    assert verdict.error_type == "ValueError", (verdict.status, verdict.error_type, verdict.message)
    return verdict.message.split(": ", 1)[1]


# --- no counter passes from one program to the next ------------------------------------------------------------
INODES = ("out = []\n"
          "for d in ('/tmp', '/dev/shm', '/var/tmp', '.'):\n"
          "    p = os.path.join(d, 'probe-file')\n"
          "    open(p, 'w').close()\n"
          "    out.append(os.stat(p).st_ino)\n"
          "    os.unlink(p)\n"
          "raise ValueError(out)")


@root_only
def test_inode_numbers_do_not_carry_from_one_program_to_the_next(verifier):
    # a program that spends inode numbers to encode a value leaves nothing the next one can read: every program
    # sees the same numbers in /tmp (and /dev/shm, /var/tmp) and in its temp dir
    first = reported(run(verifier, INODES))
    spend = run(verifier, "for i in range(300):\n"
                          "    for d in ('/tmp', '.'):\n"
                          "        p = os.path.join(d, f'x{i}')\n"
                          "        open(p, 'w').close()\n"
                          "        os.unlink(p)\n"
                          "os.mkdir('/tmp/left-behind')\n"
                          "return 'ok'")
    assert spend.passed, spend.message
    third = reported(run(verifier, INODES))
    assert third == first


@root_only
def test_a_program_sees_an_empty_tmp_and_the_next_one_too(verifier):
    first = run(verifier, "os.mkdir('/tmp/d')\nopen('/tmp/d/f', 'w').write('42')\nos.symlink('/tmp/d', '/tmp/l')\n"
                          "return 'ok'")
    assert first.passed, first.message
    listing = reported(run(verifier, "raise ValueError(sorted(os.listdir('/tmp')), os.getcwd())"))
    names = eval(listing)[0]
    assert len(names) == 1 and names[0].startswith("codechat-"), listing  # only its own temp dir
