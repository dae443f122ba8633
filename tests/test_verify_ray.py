"""The Ray verifier (codechat/verifier/ray_backend.py) against a local Ray instance started here: the same verdicts as the
local pool, per-program timeouts enforced on the worker, and a killed or hung node pool replaced mid-batch
without losing a verdict. Skipped when Ray is not installed (pip install 'codechat[ray]')."""
import os
import signal
import threading
import time

import pytest

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier
from codechat.verifier.factory import make_verifier

ray = pytest.importorskip("ray")

TASK = Task(task_id="add", prompt="Write add(a, b) that returns the sum.",
            tests=["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], entry_point="add")
SLOW = "def add(a, b):\n    import time\n    time.sleep(0.6)\n    return a + b\n"
COMPLETIONS = ["```python\ndef add(a, b):\n    return a + b\n```", "def add(a, b):\n    return a - b\n",
               "   ", "def add(a, b):\n    while True:\n        pass\n",
               "def add(a, b):\n    raise ValueError('x')\n", "import os\ndef add(a, b):\n    return a + b\n"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def cfg(**kw) -> VerifierConfig:
    return VerifierConfig(**{"backend": "ray", "workers": 2, "timeout_s": 1.5, **kw})


def summary(verdicts):
    return [(v.status, v.passed, v.tests_passed, v.error_type) for v in verdicts]


def test_same_verdicts_as_the_local_pool_and_worker_side_timeout(cluster):
    pairs = [(TASK, c) for c in COMPLETIONS]
    with Verifier(VerifierConfig(workers=2, timeout_s=1.5)) as local:
        want = local.verify_many(pairs)
    with make_verifier(cfg()) as v:
        t0 = time.monotonic()
        got = v.verify_many(pairs)
        assert time.monotonic() - t0 < 20
        assert v.pool.replaced == 0  # the infinite loop was stopped by the node's sandbox, not by the trainer
    assert summary(got) == summary(want)
    assert [x.status for x in got][:4] == ["passed", "failed", "no_code", "timeout"]


def _kill_first_pool_when_busy(v, how):
    """Once jobs are in flight, SIGKILL (dead) or SIGSTOP (hung) the node pool's actor process."""
    pool = v.pool
    while pool._slots.qsize() == pool.workers:  # wait until something runs
        time.sleep(0.05)
    time.sleep(0.3)
    pid = ray.get(pool.actors[0].pid.remote())
    os.kill(pid, how)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["dead", "hung"])
def test_a_dead_or_hung_node_pool_is_replaced_mid_batch(cluster, how):
    pairs = [(TASK, SLOW if i % 2 == 0 else COMPLETIONS[1]) for i in range(8)]
    with make_verifier(cfg(ray_grace_s=2.0)) as v:
        killer = threading.Thread(target=_kill_first_pool_when_busy, args=(v, how))
        killer.start()
        got = v.verify_many(pairs)
        killer.join()
        assert v.pool.replaced >= 1
    assert [x.status for x in got] == ["passed", "failed"] * 4


def test_a_slow_starting_node_pool_is_not_judged_hung(cluster):
    """A pool that takes longer to start than timeout + grace (a busy node) still judges its first jobs: the
    reply clock starts when the pool is ready. Before, every try's clock included the start: infra_error."""
    from codechat.verifier.ray_backend import RayPool, _NodePool

    def slow_pool():  # defined here so Ray ships the class by value to the actor
        class SlowStart(_NodePool):
            def __init__(self, *a):
                time.sleep(5.0)
                super().__init__(*a)
        return SlowStart

    class SlowPool(RayPool):
        node_class = slow_pool()

    c = cfg(ray_grace_s=2.0, plus_inputs=False)  # 1.5 + 2.0 < 5 s start; the RayVerifier itself, unwrapped
    v = make_verifier(c)
    with v:
        v._pool.close()
        v._pool = SlowPool(c)
        got = v.verify_many([(TASK, COMPLETIONS[0]), (TASK, COMPLETIONS[1])])
        assert v.pool.replaced == 0
    assert [x.status for x in got] == ["passed", "failed"]


def test_backend_name_is_checked():
    from codechat import CodechatError
    with pytest.raises(CodechatError, match="valid: local, ray"):
        make_verifier(VerifierConfig(backend="slurm"))
