"""`DelegatingVerifier`: the base of verifier wrappers (dedup.py, plus.py) that change how verdicts are made and
hand the rest of the Verifier API to the verifier they wrap (`inner`), unchanged.

    class MyVerifier(DelegatingVerifier):
        def verify_many(self, pairs): ...     # the wrapper's own work; everything else is `inner`'s
"""
from __future__ import annotations

from codechat.verifier.verdict import Verdict


class DelegatingVerifier:
    """verify_io, call_function, workers, cfg, close and the context manager of the wrapped verifier `inner`."""

    def __init__(self, inner):
        self.inner = inner

    def verify_io(self, *args, **kw) -> Verdict:
        return self.inner.verify_io(*args, **kw)

    def call_function(self, *args, **kw):
        return self.inner.call_function(*args, **kw)

    @property
    def workers(self) -> int:
        return self.inner.workers

    @property
    def cfg(self):
        return self.inner.cfg

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
