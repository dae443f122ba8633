"""Verify while decoding: completions go to the verifier the moment the sampler finishes them, while the rest of
the batch keeps decoding; the step then waits only for the verdicts still running.

    with VerifyStream(verifier, per_sample_tasks) as vs:
        batch = engine.sample(prompts, n, cfg, on_finish=vs.submit)   # submit(row, text) from the decode loop
        verdicts, timing = vs.result()                                # (N,) in row order, as verify_many gives

`submit` hands the row to a pool of `verifier.workers` threads, each running `verifier.verify(task, text)`: every
sandbox worker takes the next finished completion as soon as it is free (SandboxPool.run borrows a worker per
call and is thread-safe). Through a DedupVerifier, a row that repeats an earlier row's (task, text) shares its
verdict instead of running again, cached verdicts are reused, and `dedup_stats` holds the batch's DedupStats
after `result()` (verifier/dedup.py `DedupStream`), as verify_many over the batch would give. Verdicts are those of `verify_many` on the same (task, text) pairs: the same verifier
code runs, only earlier (tested). An error in a verification is raised by `result()`. Simplifies: a row is
verified once, when its text is final (no partial programs); `submit` never blocks the decoding thread.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from codechat.tasks import Task
from codechat.verifier.dedup import DedupStats, DedupStream, DedupVerifier
from codechat.verifier.verdict import Verdict


@dataclass
class StreamTiming:
    """How much verification overlapped decoding, for one batch."""

    overlap_frac: float
    """Share of the verdicts that were ready before decoding ended (0 = none overlapped, as without streaming)."""
    tail_s: float
    """Seconds from the end of decoding until the last verdict: what the step still waits for."""


class VerifyStream:
    def __init__(self, verifier, tasks_per_row: list[Task]):
        self.verifier = verifier
        self.tasks = tasks_per_row
        """The task of each sample row (N,)."""
        self._futures: dict[int, Future] = {}
        self._done_at: dict[int, float] = {}
        self._pool = ThreadPoolExecutor(max(1, verifier.workers), thread_name_prefix="verify-stream")
        self._dedup = DedupStream(verifier, self._pool) if isinstance(verifier, DedupVerifier) else None
        self.dedup_stats: DedupStats | None = None
        """Through a DedupVerifier: what the batch ran and reused, set by result()."""

    def submit(self, row: int, text: str) -> None:
        """Queue sample `row`'s final text for verification; each row once."""
        if not 0 <= row < len(self.tasks) or row in self._futures:
            raise ValueError(f"verify stream: row {row} is out of range or already submitted")
        if self._dedup is not None:
            f = self._dedup.submit(row, self.tasks[row], text)  # a copy or a cached pair: a Future that is not a new run
        else:
            f = self._pool.submit(self.verifier.verify, self.tasks[row], text)
        self._futures[row] = f
        f.add_done_callback(lambda _f, row=row: self._done_at.setdefault(row, time.perf_counter()))

    def ready(self, row: int) -> bool:
        """Whether sample `row`'s verdict is in."""
        return row in self._done_at

    def result(self) -> tuple[list[Verdict], StreamTiming]:
        """Wait for every verdict (call after the sampler returned) -> verdicts in row order and the timing."""
        decoded_at = time.perf_counter()
        missing = [i for i in range(len(self.tasks)) if i not in self._futures]
        if missing:
            raise RuntimeError(f"verify stream: no verdict for rows {missing[:5]} (the sampler never finished them)")
        verdicts = [self._futures[i].result() for i in range(len(self.tasks))]  # raises a verification's error
        for i in range(len(self.tasks)):  # a Future's callbacks may run just after result() returned
            self._done_at.setdefault(i, time.perf_counter())
        if self._dedup is not None:
            self.dedup_stats = self._dedup.finish()
        done = list(self._done_at.values())
        early = sum(t <= decoded_at for t in done)
        tail = max(done) - decoded_at if done else 0.0
        return verdicts, StreamTiming(early / max(len(done), 1), max(tail, 0.0))

    def close(self) -> None:
        """Wait for the verifications in flight and stop the threads."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "VerifyStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
