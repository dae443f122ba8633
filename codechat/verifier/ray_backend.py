"""The verifier on a Ray cluster (`verifier.backend: ray`): one sandbox pool per node, held by a Ray actor, and
the same `Verifier` API and verdicts as the local pool. `codechat.verifier.make_verifier(cfg)` picks the backend.

    ray start --head                      # on one node; `ray start --address HEAD:6379` on the others
    codechat train ... verifier.backend=ray verifier.ray_address=auto

Only `SandboxPool.run(Job) -> RunResult` moves: code extraction, the job's limits and the verdict are built by
`codechat.verifier.verify.Verifier` on the trainer's side exactly as with the local pool, so a verdict cannot depend on
the backend. Each node actor runs `SandboxPool(workers)` (verifier.workers, 0 = the node's CPU count); the
trainer keeps at most `workers` jobs in flight per node, so a job starts as soon as it reaches its node.

Failures: per-program timeouts and limits are enforced on the worker node, by the sandbox (as locally). The
trainer additionally waits at most timeout + `ray_grace_s` for a reply: a node pool that does not answer by
then (hung, stopped, swapped out) is killed, a new one is started on the same node, and the job runs again -
as does a job whose actor died (node lost, OOM). A job that fails on `RETRIES` pools in a row gets the
`infra_error` verdict (SandboxError) instead of stalling training. A job's reply clock starts only once its node
pool has answered a readiness call (at most `START_TIMEOUT_S`): a pool's start (a Ray worker process, the
codechat import, the sandbox zygotes) takes seconds on a busy node and must not count as the program's time -
it did, and a fresh pool's first jobs were judged hung until all tries were spent.

Simplifications: the node list is read at start (nodes added later are not used); the actors belong to the
process that made them (under torchrun each rank has its own actors, sharing the nodes' CPUs: set
verifier.workers); no code is shipped: codechat must be importable on every node (same install or path).
"""
from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codechat import CodechatError
from codechat.config import VerifierConfig
from codechat.sandbox import RunResult, SandboxPool
from codechat.verifier.verify import Verifier

RETRIES = 3
START_TIMEOUT_S = 120.0


def _ray():
    try:
        import ray  # ray: optional dependency (the ray extra), imported on use
    except ImportError:
        raise CodechatError("verifier.backend=ray needs Ray: pip install 'codechat[ray]'") from None
    return ray


class _NodePool:
    """Runs on one node (as a threaded Ray actor): a SandboxPool, one job per zygote at a time."""

    def __init__(self, workers: int, hide_paths: tuple[str, ...]):
        self.pool = SandboxPool(workers, hide_paths)

    def run(self, job):
        return self.pool.run(job)

    def pid(self) -> int:
        return os.getpid()


class RayPool:
    """Trainer side: the `SandboxPool` interface (`run`, `close`) over one `_NodePool` actor per alive node."""

    node_class = _NodePool

    def __init__(self, cfg: VerifierConfig):
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=cfg.ray_address or os.environ.get("RAY_ADDRESS") or None, include_dashboard=False,
                     log_to_driver=False)
        self.cfg = cfg
        self.nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.sizes = [cfg.workers or int(n["Resources"].get("CPU", 1)) or 1 for n in self.nodes]
        self.actors = [self._start(i) for i in range(len(self.nodes))]
        for i, a in enumerate(self.actors):
            if not self._ready(a):
                self.close()
                raise CodechatError(f"verifier.backend=ray: the sandbox pool on node {self.nodes[i]['NodeID'][:12]} "
                                    f"did not start within {START_TIMEOUT_S:.0f}s")
        self.generation = [0] * len(self.nodes)
        self._locks = [threading.Lock() for _ in self.nodes]  # per node: a replacement waits out its own start only
        self._slots: queue.Queue[int] = queue.Queue()  # one entry per free sandbox worker: its node index
        for i, n in enumerate(self.sizes):
            for _ in range(n):
                self._slots.put(i)
        self.replaced = 0
        """Node pools killed and started again (hung or dead)."""

    @property
    def workers(self) -> int:
        return sum(self.sizes)

    def _start(self, i: int):
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # ray: optional extra

        root = str(Path(__file__).resolve().parents[1])  # this codechat first on the actor's path
        path = [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = {"PYTHONPATH": os.pathsep.join(path)}
        cls = ray.remote(self.node_class).options(
            num_cpus=0, max_concurrency=self.sizes[i] + 1, max_restarts=0, runtime_env={"env_vars": env},
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.nodes[i]["NodeID"], soft=False))
        return cls.remote(self.sizes[i], tuple(self.cfg.hide_paths))

    @staticmethod
    def _ready(actor) -> bool:
        """Wait until the actor is constructed and answers; False when it died or took over START_TIMEOUT_S."""
        ray = _ray()
        try:
            ray.get(actor.pid.remote(), timeout=START_TIMEOUT_S)
            return True
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
            return False

    def _replace(self, i: int, generation: int) -> None:
        """Kill node pool i and start another, unless a concurrent failure already did (same generation). Holds node
        i's lock until the new pool is ready, so node i's next jobs wait for it and other nodes' jobs do not."""
        ray = _ray()
        with self._locks[i]:
            if self.generation[i] != generation:
                return
            try:
                ray.kill(self.actors[i], no_restart=True)
            except Exception:  # already gone
                pass
            self.actors[i] = self._start(i)
            self._ready(self.actors[i])  # a pool that did not start fails its next job, which replaces it again
            self.generation[i] += 1
            self.replaced += 1

    def run_many(self, jobs):
        """Results in input order (None for a None job); each job waits on a Ray node, several in flight."""
        with ThreadPoolExecutor(max(self.workers, 1)) as ex:
            yield from ex.map(lambda j: None if j is None else self.run(j), list(jobs))

    def run(self, job):
        ray = _ray()
        why = ""
        for _ in range(RETRIES):
            i = self._slots.get()
            try:
                with self._locks[i]:
                    actor, gen = self.actors[i], self.generation[i]
                try:
                    return ray.get(actor.run.remote(job), timeout=job.timeout_s + self.cfg.ray_grace_s)
                except ray.exceptions.GetTimeoutError:
                    why = f"node pool {i} did not answer within {job.timeout_s + self.cfg.ray_grace_s:.0f}s"
                except ray.exceptions.RayActorError as e:
                    why = f"node pool {i} died ({type(e).__name__})"
                self._replace(i, gen)
            finally:
                self._slots.put(i)
        return RunResult("infra_error", "SandboxError", f"the sandbox failed: {why} ({RETRIES} tries)")

    def close(self) -> None:
        ray = _ray()
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        self.actors = []


class RayVerifier(Verifier):
    """`Verifier` whose programs run on Ray nodes; everything else (extraction, jobs, verdicts) is inherited."""

    def __init__(self, cfg: VerifierConfig):
        super().__init__(cfg)
        self._pool: RayPool | None = RayPool(cfg)  # eager: fail at start when the cluster is unreachable
        self.workers = self._pool.workers

    @property
    def pool(self) -> RayPool:
        if self._pool is None:
            raise CodechatError("the Ray verifier is closed")
        return self._pool
