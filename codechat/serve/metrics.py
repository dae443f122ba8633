"""Counters behind GET /metrics: requests, programs/s, queue depth, verdicts by status, p50/p99 latency."""
from __future__ import annotations

import threading
import time
from collections import Counter, deque

WINDOW_S = 60.0
"""programs_per_s is measured over the last WINDOW_S seconds (and since start, `programs_per_s_total`)."""
LATENCIES_KEPT = 4096
"""p50/p99 are over the last LATENCIES_KEPT requests of each endpoint."""


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no data)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.requests: Counter = Counter()
        self.responses: Counter = Counter()  # HTTP status codes
        self.statuses: Counter = Counter()  # /verify verdict statuses and /run_code run statuses
        self.programs = 0
        self._recent: deque = deque()  # (time, programs) of the last WINDOW_S seconds
        self._latency: dict[str, deque] = {}

    def request(self, endpoint: str, http_status: int) -> None:
        with self._lock:
            self.requests[endpoint] += 1
            self.responses[str(http_status)] += 1

    def done(self, endpoint: str, seconds: float, statuses: list[str]) -> None:
        """A request that ran programs: its latency and one status per program."""
        now = time.monotonic()
        with self._lock:
            self._latency.setdefault(endpoint, deque(maxlen=LATENCIES_KEPT)).append(seconds)
            self.statuses.update(statuses)
            self.programs += len(statuses)
            self._recent.append((now, len(statuses)))
            while self._recent and self._recent[0][0] < now - WINDOW_S:
                self._recent.popleft()

    def snapshot(self, queue_depth: int, running: int) -> dict:
        now = time.monotonic()
        with self._lock:
            while self._recent and self._recent[0][0] < now - WINDOW_S:
                self._recent.popleft()
            up = now - self.started
            window = min(WINDOW_S, up) or 1e-9
            return {
                "uptime_s": round(up, 3), "requests": dict(self.requests), "responses": dict(self.responses),
                "programs": self.programs, "programs_per_s": round(sum(n for _, n in self._recent) / window, 3),
                "programs_per_s_total": round(self.programs / (up or 1e-9), 3),
                "queue_depth": queue_depth, "running": running, "statuses": dict(self.statuses),
                "latency_s": {ep: {"p50": round(percentile(list(d), 50), 6), "p99": round(percentile(list(d), 99), 6),
                                   "n": len(d)} for ep, d in self._latency.items()},
            }
