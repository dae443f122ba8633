"""MBPP+ / HumanEval+ plus inputs in every verdict (`verifier.plus_inputs`, on by default): the reward, `codechat
verify` and `serve /verify` judge an evalplus task as evalplus's plus score does, not by its few shown asserts.

    v = PlusVerifier(make_verifier(cfg))      # make_verifier wraps when cfg.plus_inputs
    v.verify_many([(mbpp_plus_task, completion)])   # passes only when it matches the reference on every input

A task with `base_input` and `plus_input` (the MBPP+ and HumanEval+ loaders set them) passes when the program's
outputs equal the expected ones on the base inputs and on base + plus (verifier/evalplus.py: expected outputs from
the file or from the reference, computed once per task and cached on disk; floats within the task's atol; the
evalplus oracles). Its verdict is the plus verdict, with `tests_passed` / `tests_total` counting inputs. Other
tasks go to the wrapped verifier unchanged, in input order.

Simplification: thinking blocks (verifier.thinking) are not stripped before the plus run; with thinking on, an
evalplus task is judged by its asserts (the wrapped verifier). A task whose reference fails on its own inputs
is judged `error` (ReferenceError), as in evaluation.

Cost: the first verdict of a task runs its reference on all its inputs (up to evalplus.REFERENCE_TIMEOUT_S). A
server that takes task records over the network passes `trusted`, so that only the tasks it loaded itself run a
reference; a hostile inline record is judged by its asserts, at the usual per-program limits.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

from codechat import CodechatError
from codechat.tasks import Task
from codechat.verifier.delegating import DelegatingVerifier
from codechat.verifier.evalplus import expected_outputs, is_evalplus, task_key, verify_base_plus
from codechat.verifier.verdict import Verdict


class PlusVerifier(DelegatingVerifier):
    """The Verifier API with evalplus tasks judged on base + plus inputs (module docstring)."""

    def __init__(self, inner, trusted: Callable[[Task], bool] | None = None):
        super().__init__(inner)
        self.trusted = trusted
        self._expected: dict[str, dict | str] = {}  # task key -> expected outputs, or the reference's error
        self._lock = threading.Lock()

    def _plus(self, task: Task) -> bool:
        return (is_evalplus(task) and not self.inner.cfg.thinking.enabled
                and (self.trusted is None or self.trusted(task)))

    def _verdict(self, task: Task, completion: str) -> Verdict:
        key = task_key(task)  # its content: the same task loaded twice shares its expected outputs
        with self._lock:
            exp = self._expected.get(key)
        if exp is None:
            try:
                exp = expected_outputs(self.inner, task)
            except CodechatError as e:
                exp = str(e)
            with self._lock:
                self._expected[key] = exp
        if isinstance(exp, str):
            return Verdict("error", False, 0.0, error_type="ReferenceError", message=exp[:200])
        return verify_base_plus(self.inner, task, completion, exp)[1]

    def verify(self, task: Task, completion: str) -> Verdict:
        return self._verdict(task, completion) if self._plus(task) else self.inner.verify(task, completion)

    def verify_many(self, pairs: Iterable[tuple[Task, str]]) -> list[Verdict]:
        pairs = list(pairs)
        if not any(self._plus(t) for t, _ in pairs):  # no evalplus task: the wrapped verifier's own batch path
            return self.inner.verify_many(pairs)
        return list(self.imap(pairs))

    def imap(self, pairs: Iterable[tuple[Task, str]]) -> Iterator[Verdict]:
        pairs = list(pairs)
        plus = [self._plus(t) for t, _ in pairs]
        if not any(plus):
            yield from self.inner.imap(pairs)
            return
        with ThreadPoolExecutor(max(1, self.inner.workers)) as ex:  # plus runs keep every sandbox worker busy
            futures = [ex.submit(self._verdict, t, c) if on else None for (t, c), on in zip(pairs, plus)]
            rest = self.inner.imap([p for p, on in zip(pairs, plus) if not on])
            for f in futures:
                yield next(rest) if f is None else f.result()

    # --- the rest of the verifier API is the wrapped verifier's (DelegatingVerifier), its sandbox pool too --------
    @property
    def pool(self):
        return self.inner.pool
