"""The candidate side: what becomes of a function task's prints (candidate.py installs these).

- `Quiet`: sys.stdout/stderr of a function task: debug prints never fail it (the first PRINT_KEEP characters
  are passed on, the rest dropped), while an output bomb still reaches the supervisor's output cap.
- `Capped`: the stdout of one `callout` (a test that captures the program's prints): the first MAX_OUT
  characters are kept and returned with the reply.
"""
from __future__ import annotations

from codechat.sandbox import wire


class Capped:
    """A stdout that keeps the first `wire.MAX_OUT` characters written and counts the rest away."""

    def __init__(self):
        self.parts, self.n = [], 0

    def write(self, s: str) -> int:
        if self.n < wire.MAX_OUT:
            self.parts.append(str(s)[:wire.MAX_OUT - self.n])
            self.n += len(self.parts[-1])
        return len(s)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "".join(self.parts)


PRINT_KEEP = 16 << 10
"""Characters of a function task's prints passed on to the captured output; the rest is discarded..."""
PRINT_CEILING = 16 << 20
"""...until this many were printed: from then on everything goes through, so the output cap ends the program
(`output_limit`), as it does for writes that bypass sys.stdout."""


class Quiet:
    """sys.stdout/stderr of a function task: debug prints never fail it (kept up to PRINT_KEEP, then dropped),
    while an output bomb still hits the supervisor's cap. Everything but `write` is the real stream's."""

    def __init__(self, real):
        self._real, self._n = real, 0

    def write(self, s) -> int:
        n = len(s) if isinstance(s, str) else 0
        self._n += n
        if self._n <= PRINT_KEEP or self._n > PRINT_CEILING:
            return self._real.write(s)
        return n

    def __getattr__(self, name: str):
        return getattr(self._real, name)
