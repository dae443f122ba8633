"""Verify once per distinct program: a wrapper around any verifier's `verify_many` (local or Ray backend) that
runs each distinct (completion, task) pair of a batch once and hands the same Verdict to its copies, with an
optional bounded cache of verdicts across batches (steps).

    v = DedupVerifier(make_verifier(cfg), cache_size=4096)
    verdicts = v.verify_many(pairs)       # same order and length as pairs
    v.last                                # DedupStats of that call: verify/dedup_frac, cache hits, seconds saved

Verify while decoding (rollout/stream.py) hands rows over one at a time; `DedupStream` gives them the same
deduplication, cache and stats as one verify_many over the batch.

Small models sample the same completion many times per group (58.5% of the demo's GRPO samples); each copy ran
the same program against the same tests. The key is the completion text and every field of the task (id,
prompt, tests, setup, entry point, time limit, metadata, kind, and a stdin/stdout task's tests and comparison):
whatever the verifier reads to build the job (a stdin/stdout task's one job per test included), so a reused
verdict is the one the verifier returned for exactly that input. Not cached across batches: `timeout` and
`memory` verdicts (they depend on the machine's load at the time) and `infra_error` ones (the verifier failed,
not the program): a later batch runs them again. Repository tasks are not verified through a Verifier and never
reach this wrapper.

Does not: recognise two different completions that extract to the same program (they run twice); make a
program that behaves randomly (its own random numbers, the clock) deterministic: its copies get the verdict of
one run instead of one run each. `dedup=False` passes every pair through (for comparisons).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Iterable

from codechat import CodechatError
from codechat.tasks import Task
from codechat.verifier.delegating import DelegatingVerifier
from codechat.verifier.verdict import Verdict

UNCACHED_STATUSES = ("timeout", "memory", "infra_error")
"""Verdicts that depend on the machine's load or on the verifier's health: reused within a batch, never cached
across batches."""


@dataclass
class DedupStats:
    """What one verify_many call ran and reused."""

    n: int = 0
    """Pairs asked for."""
    ran: int = 0
    """Pairs sent to the verifier (distinct and not cached)."""
    cache_hits: int = 0
    """Pairs answered from the cross-batch cache."""
    saved_s: float = 0.0
    """Sandbox seconds not spent: the sum of the reused verdicts' durations."""

    @property
    def dedup_frac(self) -> float:
        """Share of the pairs that were not run (batch duplicates and cache hits)."""
        return 1.0 - self.ran / self.n if self.n else 0.0

    def __add__(self, other: "DedupStats") -> "DedupStats":
        return DedupStats(self.n + other.n, self.ran + other.ran, self.cache_hits + other.cache_hits,
                          self.saved_s + other.saved_s)

    def metrics(self) -> dict[str, float]:
        return {"verify/dedup_frac": self.dedup_frac, "verify/cache_hit_frac": self.cache_hits / max(self.n, 1),
                "verify/saved_s": self.saved_s}


def pair_key(task: Task, completion: str) -> bytes:
    """A digest of everything that determines the verdict of `completion` on `task`."""
    h = hashlib.sha256()
    for part in (completion, task.task_id, task.prompt, repr(list(task.tests)), task.setup or "",
                 task.entry_point or "", repr(task.timeout_s), repr(sorted(task.metadata.items(), key=str)),
                 task.kind, repr(task.stdio)):  # stdio: a dataclass repr, every test and comparison field
        b = part.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))  # length-prefixed: no two field splits give the same bytes
        h.update(b)
    return h.digest()


class DedupVerifier(DelegatingVerifier):
    """`verify_many` once per distinct pair; the rest of the Verifier API is the wrapped verifier's."""

    def __init__(self, inner, cache_size: int = 0, dedup: bool = True):
        if cache_size < 0:
            raise CodechatError(f"verifier.cache_size must be >= 0, got {cache_size}")
        super().__init__(inner)
        self.cache_size, self.dedup = int(cache_size), bool(dedup)
        self._cache: OrderedDict[bytes, Verdict] = OrderedDict()
        self._lock = threading.Lock()  # the cache is read by the decoding thread and filled by stream workers
        self.last = DedupStats()
        self.total = DedupStats()

    def verify_many(self, pairs: Iterable[tuple[Task, str]]) -> list[Verdict]:
        pairs = list(pairs)
        if not self.dedup:
            out = self.inner.verify_many(pairs)
            self._count(DedupStats(n=len(pairs), ran=len(pairs)))
            return out
        keys = [pair_key(t, c) for t, c in pairs]
        known: dict[bytes, Verdict | None] = {}  # key -> verdict, from the cache or from this batch's run
        hits: set[bytes] = set()
        to_run: list[int] = []  # the first pair of each key that must run
        for i, k in enumerate(keys):
            if k in known:
                continue
            cached = self.lookup(k)
            if cached is not None:
                known[k] = cached
                hits.add(k)
            else:
                known[k] = None  # placeholder: runs below
                to_run.append(i)
        fresh = self.inner.verify_many([pairs[i] for i in to_run]) if to_run else []
        if len(fresh) != len(to_run):
            raise CodechatError(f"the verifier returned {len(fresh)} verdicts for {len(to_run)} pairs")
        for i, v in zip(to_run, fresh):
            known[keys[i]] = v
            self._remember(keys[i], v)
        out = [known[k] for k in keys]
        ran = set(to_run)
        self._count(DedupStats(n=len(pairs), ran=len(to_run), cache_hits=sum(k in hits for k in keys),
                               saved_s=sum(v.duration_s for i, v in enumerate(out) if i not in ran)))
        return out

    def lookup(self, key: bytes, touch: bool = True) -> Verdict | None:
        """The cached verdict of a pair_key, or None; touch: mark it as recently used."""
        with self._lock:
            v = self._cache.get(key)
            if v is not None and touch:
                self._cache.move_to_end(key)
            return v

    def _remember(self, key: bytes, v: Verdict) -> None:
        if self.cache_size <= 0 or v.status in UNCACHED_STATUSES:
            return
        with self._lock:
            self._cache[key] = v
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)  # least recently used

    def _count(self, st: DedupStats) -> None:
        self.last = st
        self.total = self.total + st

    # --- the verifier API on top of verify_many; the rest is the wrapped verifier's (DelegatingVerifier) ----------
    def verify(self, task: Task, completion: str) -> Verdict:
        return self.verify_many([(task, completion)])[0]

    def imap(self, pairs):
        return iter(self.verify_many(pairs))


class DedupStream:
    """verify_many's deduplication for rows that arrive one at a time (verify while decoding, rollout/stream.py):
    `submit` is called from the decoding thread; the first row of each distinct pair runs on `pool` (or is
    answered from the cache), its copies share that row's Future. The cache is only read during the batch;
    `finish` (once every Future is done) updates it in row order and records the batch's DedupStats as the
    verifier's `last`: verdicts, stats and the cache afterwards are those of one verify_many over the batch."""

    def __init__(self, verifier: DedupVerifier, pool: Executor):
        self.dv, self.pool = verifier, pool
        self._keys: dict[bytes, list] = {}  # key -> [its lowest row, how its first row was answered, Future]
        self._rows: list[tuple[str, Future]] = []  # per submitted row: "ran" | "hit" (cache) | "copy", Future

    def submit(self, row: int, task: Task, completion: str) -> Future:
        if not self.dv.dedup:
            how, f = "ran", self.pool.submit(self._run, task, completion)
        else:
            key = pair_key(task, completion)
            if key in self._keys:
                entry = self._keys[key]
                entry[0] = min(entry[0], row)
                how, f = ("hit" if entry[1] == "hit" else "copy"), entry[2]
            else:
                cached = self.dv.lookup(key, touch=False)  # touched in row order by finish, as verify_many does
                if cached is not None:
                    how, f = "hit", Future()
                    f.set_result(cached)
                else:
                    how, f = "ran", self.pool.submit(self._run, task, completion)
                self._keys[key] = [row, how, f]
        self._rows.append((how, f))
        return f

    def _run(self, task: Task, completion: str) -> Verdict:
        out = self.dv.inner.verify_many([(task, completion)])
        if len(out) != 1:
            raise CodechatError(f"the verifier returned {len(out)} verdicts for 1 pair")
        return out[0]

    def finish(self) -> DedupStats:
        """The batch's stats (call when every submitted Future is done); also the verifier's `last`."""
        by_row = sorted((row, key, how, f) for key, (row, how, f) in self._keys.items())
        for _, key, how, _ in by_row:  # verify_many: every lookup first, then the fresh verdicts, in pair order
            if how == "hit":
                self.dv.lookup(key)
        for _, key, how, f in by_row:
            if how == "ran":
                self.dv._remember(key, f.result())
        st = DedupStats(n=len(self._rows), ran=sum(how == "ran" for how, _ in self._rows),
                        cache_hits=sum(how == "hit" for how, _ in self._rows),
                        saved_s=sum(f.result().duration_s for how, f in self._rows if how != "ran"))
        self.dv._count(st)
        return st
