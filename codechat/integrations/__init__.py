"""codechat's verifier as the reward of other trainers: `trl` (GRPOTrainer reward_funcs), `verl` (compute_score).

Both judge in-process (a sandbox pool in the trainer's process) or against `codechat serve` (`url=`), through
`Judge` below, so a reward is the same verdict `codechat verify` gives.
"""
from __future__ import annotations

import json
import os
import time

import httpx

from codechat import CodechatError
from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.tasks.loaders import tasks_from_records
from codechat.verifier.dedup import DedupVerifier
from codechat.verifier.verdict import Verdict
from codechat.verifier.verify import Verifier

URL_ENV, TOKEN_ENV = "CODECHAT_SERVE_URL", "CODECHAT_SERVE_TOKEN"


def as_record(value, where: str) -> dict:
    """A task record from a dataset cell: a dict, its JSON text, or a list of assert lines (codechat format)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise CodechatError(f"{where}: not a JSON task record: {value[:80]!r}") from None
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return {"task_id": "tests", "prompt": "", "tests": list(value)}
    if not isinstance(value, dict):
        raise CodechatError(f"{where}: a task record must be an object, JSON text or a list of asserts, "
                            f"got {type(value).__name__}")
    # a `datasets` column mixing formats (codechat and MBPP rows) holds every key of every row, None where a
    # row has none (Arrow's struct type): a row is read by its own, non-null fields
    return {k: v for k, v in value.items() if v is not None}


class Judge:
    """Verdicts for (task record, completion) pairs: in-process, or from `codechat serve` at `url`."""

    def __init__(self, url: str | None = None, token: str | None = None, cfg: VerifierConfig | None = None,
                 timeout_s: float = 600.0, fmt: str | None = None):
        self.url = (url or "").rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        self.cfg, self.timeout_s, self.fmt = cfg or VerifierConfig(), timeout_s, fmt
        self._local: DedupVerifier | None = None
        self._tasks: dict[str, tuple[str, Task]] = {}  # record text -> (its key, its Task)

    def _task(self, rec: dict, where: str) -> tuple[str, Task]:
        text = json.dumps(rec, sort_keys=True, default=str)
        if text not in self._tasks:
            if len(self._tasks) > 100_000:
                self._tasks.clear()
            (task,) = tasks_from_records([rec], where, self.fmt)
            self._tasks[text] = (f"t{len(self._tasks)}", task)
        return self._tasks[text]

    def verdicts(self, records: list[dict], completions: list[str], where: str = "dataset") -> list[Verdict]:
        keyed = [self._task(r, f"{where}[{i}]") for i, r in enumerate(records)]
        if not self.url:
            if self._local is None:
                self._local = DedupVerifier(Verifier(self.cfg), dedup=True)
            return self._local.verify_many([(t, c) for (_, t), c in zip(keyed, completions)])
        tasks, ids, by_id = [], [], {}
        for (key, task), rec in zip(keyed, records):
            # codechat records are renamed to their key (a list of asserts has no id of its own); other formats
            # keep the id their loader reads, which must then differ between distinct records
            tid = key if task.metadata.get("source") == "codechat" else task.task_id
            if by_id.setdefault(tid, key) != key:
                raise CodechatError(f"{where}: two different task records have the id {tid!r}: give each its own")
            if len(by_id) > len(tasks):
                tasks.append({**rec, "task_id": tid} if tid == key else rec)
            ids.append(tid)
        body = {"tasks": tasks, "completions": [{"task_id": t, "completion": c} for t, c in zip(ids, completions)]}
        if self.fmt:
            body["format"] = self.fmt
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        # ASCII JSON: a completion holding a lone surrogate (a model can emit one) travels as its \u escape,
        # where httpx's own encoder (strict UTF-8) would raise
        content = json.dumps(body, ensure_ascii=True).encode("ascii")
        deadline = time.monotonic() + self.timeout_s
        while True:
            r = httpx.post(self.url + "/verify", content=content, headers=headers,
                           timeout=max(1.0, deadline - time.monotonic()))
            retry = r.status_code in (429, 503) and time.monotonic() < deadline
            if not retry:
                break
            try:  # the server is full or closing: come back when it says (bounded by this call's timeout)
                time.sleep(min(30.0, max(0.1, float(r.headers.get("retry-after", "1")))))
            except ValueError:
                time.sleep(1.0)
        if r.status_code != 200:
            raise CodechatError(f"{self.url}/verify answered {r.status_code}: {r.text[:300]}")
        out = []
        for d in r.json()["verdicts"]:
            d = {k: v for k, v in d.items() if k not in ("task_id", "sample_id")}
            out.append(Verdict(**{**d, "blocked": tuple(d.get("blocked", ()))}))
        return out

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            self._local = None

