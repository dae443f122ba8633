"""Cancel the sandbox runs of work nobody waits for any more (`codechat serve`: a client that disconnected).

    c = Cancel(start_by=time.monotonic() + 30)       # owned by one request
    with cancel.scope(c):                            # in the thread doing that request's work
        pool.run(job)                                # or pool.run_many(jobs): raises Cancelled / Expired
    c.cancel()                                       # from any thread: kills the zygotes busy for it

While a thread is inside `scope(c)`, every zygote the pool lends it is held on `c`; `c.cancel()` kills those
zygotes' process groups (their programs die with them; the pool replaces them) and the thread's runs end with
`Cancelled`. `start_by` bounds how long the thread waits for an idle zygote (`Expired` past it), so a request's
deadline bounds its queueing, not only its run. Outside a scope the pool behaves as before (waits forever).
"""
from __future__ import annotations

import contextlib
import math
import os
import queue
import signal
import threading
import time

POLL_S = 0.1
"""How often a waiting borrower looks at its Cancel (a cancelled or expired request stops waiting this late)."""


class Cancelled(Exception):
    """The work's Cancel was cancelled: its runs were killed and no more start."""


class Expired(Cancelled):
    """No zygote became idle before the work's `start_by`."""


class Cancel:
    def __init__(self, start_by: float = math.inf):
        self.start_by = start_by
        """time.monotonic() past which the work may not start another run (waiting for a zygote ends)."""
        self.cancelled = False
        self.started = False
        self._lock = threading.Lock()
        self._held: set[int] = set()  # process-group ids of the zygotes busy for this work

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            pids = list(self._held)
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    def begin(self) -> None:
        """The work starts now (in its thread); raises Cancelled or Expired when it may not start any more."""
        with self._lock:
            if self.cancelled:
                raise Cancelled("the request was cancelled")
            if time.monotonic() > self.start_by:
                raise Expired("the request waited past its deadline")
            self.started = True

    def expire(self) -> bool:
        """Cancel the work if it has not begun; True when it had not (it never will)."""
        with self._lock:
            if not self.started:
                self.cancelled = True
            return not self.started

    def hold(self, pid: int) -> None:
        """A zygote (process group `pid`) starts a run for this work; raises Cancelled if it is cancelled."""
        with self._lock:
            if self.cancelled:
                raise Cancelled("the request was cancelled")
            self._held.add(pid)

    def release(self, pid: int) -> bool:
        """The zygote's run is over; True when the work was cancelled meanwhile (the zygote may be dead)."""
        with self._lock:
            self._held.discard(pid)
            return self.cancelled


_local = threading.local()


def current() -> Cancel | None:
    """The Cancel of the work this thread is doing (None outside `scope`)."""
    return getattr(_local, "cancel", None)


@contextlib.contextmanager
def scope(c: Cancel):
    _local.cancel = c
    try:
        yield c
    finally:
        _local.cancel = None


def borrow(idle: queue.Queue):
    """The next item of `idle` (a zygote or an empty slot), waiting no longer than the current Cancel allows."""
    c = current()
    if c is None:
        return idle.get()
    while True:
        if c.cancelled:
            raise Cancelled("the request was cancelled")
        wait = min(POLL_S, c.start_by - time.monotonic())
        if wait <= 0:
            raise Expired("no sandbox worker became free before the request's deadline")
        try:
            return idle.get(timeout=wait)
        except queue.Empty:
            continue
