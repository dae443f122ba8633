"""Judge each distinct final workspace once: a wrapper around `RepoJudge` that hands the verdict of one judgement
to every episode whose change to the same task is the same (a group's episodes often end with the same edit).

    judge = DedupJudge(RepoJudge(warm=True))
    v = judge.judge(task, changes)          # as RepoJudge.judge
    judge.calls, judge.hits, judge.saved_s  # judgements asked for, answered from another one, seconds not spent

The key is a SHA-256 of the task (id, hidden tests, test patch, visible tests, FAIL_TO_PASS, PASS_TO_PASS, protected globs,
test time limit) and the change exactly as given (the {path: text or None} map with sorted keys, or the diff
text): equal keys are the same input to the judge. Two episodes asking at the same time share one judgement.
Not kept after it returns: `timeout`, `env_error` and `error` verdicts (they may depend on the machine's load
or the environment's health); every later request runs them again. Each caller gets its own copy of the verdict.
Everything else (clone, base, env_for, warm, close, ...) is the wrapped judge's.
"""
from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict

from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge, RepoVerdict

UNCACHED = ("timeout", "env_error", "error")


def judge_key(task: RepoTask, change) -> str:
    h = hashlib.sha256()
    fields = [task.task_id, sorted(task.hidden_tests.items()), list(task.visible_tests), task.test_patch or "", list(task.fail_to_pass),
              list(task.pass_to_pass), list(getattr(task, "protected", ()) or ()), task.limits.test_timeout_s]
    h.update(json.dumps(fields, default=str).encode())
    h.update(b"\0")
    h.update(json.dumps(change, sort_keys=True).encode() if isinstance(change, dict) else repr(change).encode())
    return h.hexdigest()


class _Running:
    """A judgement in progress: the requests for the same key wait on `done`, then take `verdict`."""

    def __init__(self):
        self.done, self.verdict = threading.Event(), None


class DedupJudge:
    def __init__(self, judge: RepoJudge, cache_size: int = 4096):
        self.inner, self.cache_size = judge, cache_size
        self._done: OrderedDict[str, RepoVerdict] = OrderedDict()
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self.calls = self.hits = 0
        self.saved_s = 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __enter__(self) -> "DedupJudge":
        return self

    def __exit__(self, *exc) -> None:
        self.inner.close()

    def judge(self, task: RepoTask, change) -> RepoVerdict:
        key = judge_key(task, change)
        with self._lock:
            self.calls += 1
            if key in self._done:
                self._done.move_to_end(key)
                return self._hit(self._done[key])
            running = self._running.get(key)
            if running is None:
                running = self._running[key] = _Running()
                mine = True
            else:
                mine = False
        if not mine:
            running.done.wait()
            if running.verdict is not None:
                with self._lock:
                    return self._hit(running.verdict)
            return self.inner.judge(task, change)  # the shared judgement raised: this one runs its own
        try:
            running.verdict = self.inner.judge(task, change)
            return running.verdict
        finally:
            with self._lock:
                del self._running[key]
                v = running.verdict
                if v is not None and v.status not in UNCACHED:
                    self._done[key] = v
                    while len(self._done) > self.cache_size:
                        self._done.popitem(last=False)
            running.done.set()

    def _hit(self, v: RepoVerdict) -> RepoVerdict:
        self.hits += 1
        self.saved_s += v.duration_s
        return copy.deepcopy(v)
