"""A small soak: mixed honest, wrong and hostile programs leave no processes, fds or temp files behind.
(bench/verify_soak.py runs 10,000.)"""
import glob
import os

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

OURS = "/tmp/codechat-[0-9]*-" + "[0-9a-f]" * 12  # procs.Spare temp dirs (only on the host without a mount namespace)
T = Task("f", "", ["assert f(2) == 4", "assert f(0) == 0"], "f")
PROGRAMS = [
    "def f(x):\n    return 2 * x\n",
    "def f(x):\n    return x\n",
    "import os\nos._exit(0)\n",
    "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\ndef f(x):\n    return 2 * x\n",
    "open('/tmp/junk', 'w').write('x')\ndef f(x):\n    return 2 * x\n",
    "import threading, time\nthreading.Thread(target=lambda: time.sleep(60)).start()\ndef f(x):\n    return 2 * x\n",
    "def f(x):\n    print('x' * 100000)\n",
    "def f(x):\n    raise ValueError\n",
]


def _children() -> set[int]:
    pid = os.getpid()
    return {int(p) for tid in os.listdir(f"/proc/{pid}/task")
            for p in open(f"/proc/{pid}/task/{tid}/children").read().split()}


def test_small_soak_leaves_nothing_behind():
    kids, fds = _children(), len(os.listdir("/proc/self/fd"))
    tmp = set(glob.glob(OURS))
    with Verifier(VerifierConfig(workers=2, timeout_s=1)) as v:
        verdicts = v.verify_many([(T, PROGRAMS[i % len(PROGRAMS)]) for i in range(160)])
    assert sum(x.passed for x in verdicts) == 4 * 20  # programs 0, 3, 4, 5 answer correctly
    assert _children() == kids
    assert len(os.listdir("/proc/self/fd")) == fds
    assert set(glob.glob(OURS)) == tmp
