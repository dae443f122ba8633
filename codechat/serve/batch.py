"""POST /verify: a whole group or step of completions in one request, judged as `codechat verify` judges them.

Request  {"tasks": [record, ...]?, "format": NAME?, "completions": [{"task_id", "completion", "sample_id"?}, ...]}
`tasks` are records in any format codechat loads (detected per record, or forced by `format`); a completion
may also name a task of the set the server loaded at start (`codechat serve --tasks FILE`). Request tasks win
over loaded ones with the same id, and run with their `timeout_s` clamped to the operator's `--max-task-timeout`.
Response {"verdicts": [{"task_id", "sample_id", **Verdict.to_dict()}, ...], "stats": {dedup stats}}
in completion order: the same verdicts as `Verifier.verify_many` in-process (identical copies of a
completion run once), with `tests_passed` / `tests_total` for partial credit.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from codechat import CodechatError
from codechat.io.jsonl import unknown_ids_line
from codechat.serve.safejson import MAX_DEPTH, too_deep
from codechat.tasks import Task
from codechat.tasks.loaders import tasks_from_records


class BadVerifyRequest(ValueError):
    """A /verify request that cannot be judged (answered 400 with this one-line reason)."""


def _clamped(task: Task, cap: float) -> Task:
    """A request's task with its time limit at most the operator's (`--max-task-timeout`)."""
    if task.timeout_s is not None and not task.timeout_s > 0:  # NaN or negative, from a loader that let it by
        raise BadVerifyRequest(f"tasks: task {task.task_id!r}: timeout_s must be a positive number"[:300])
    if task.timeout_s is None or task.timeout_s <= cap:
        return task
    return dataclasses.replace(task, timeout_s=cap)


def parse(req: Any, loaded: dict[str, Task], max_batch: int,
          max_task_timeout_s: float = math.inf) -> tuple[list[tuple[Task, str]], list[dict]]:
    """(task, completion) pairs and the ids to echo, in request order. The request's own tasks run with their
    `timeout_s` clamped to `max_task_timeout_s`; tasks loaded at start are the operator's and kept as they are."""
    if not isinstance(req, dict):
        raise BadVerifyRequest("the request body must be a JSON object")
    comps = req.get("completions")
    if not isinstance(comps, list):
        raise BadVerifyRequest("completions must be a list of {task_id, completion}")
    if len(comps) > max_batch:
        raise BadVerifyRequest(f"{len(comps)} completions is over the limit of {max_batch} per request")
    tasks = dict(loaded)
    records = req.get("tasks") or []
    if not isinstance(records, list):
        raise BadVerifyRequest("tasks must be a list of task records")
    fmt = req.get("format")
    if fmt is not None and not isinstance(fmt, str):
        raise BadVerifyRequest("format must be a string")
    if too_deep(records):
        raise BadVerifyRequest(f"tasks: a record nests deeper than {MAX_DEPTH} levels")
    try:
        tasks.update((t.task_id, _clamped(t, max_task_timeout_s))
                     for t in tasks_from_records(records, "tasks", fmt))
    except BadVerifyRequest:
        raise
    except RecursionError:
        raise BadVerifyRequest("tasks: a record nests too deeply to load") from None
    except (CodechatError, ValueError, TypeError, KeyError, OverflowError) as e:
        raise BadVerifyRequest(f"{e}".splitlines()[0][:300] if str(e) else f"tasks: {type(e).__name__}") from None
    pairs, ids, unknown = [], [], []
    for i, c in enumerate(comps):
        if not isinstance(c, dict):
            raise BadVerifyRequest(f"completions[{i}] must be an object")
        tid, text = c.get("task_id"), c.get("completion")
        if not isinstance(text, str):
            raise BadVerifyRequest(f"completions[{i}]: completion must be a string")
        sid = c.get("sample_id")
        if not (sid is None or isinstance(sid, (str, int, float))):
            raise BadVerifyRequest(f"completions[{i}]: sample_id must be a string, a number or null")
        if str(tid) not in tasks:
            unknown.append((i, str(tid)[:40]))
            continue
        pairs.append((tasks[str(tid)], text))
        ids.append({"task_id": str(tid), "sample_id": c.get("sample_id")})
    if unknown:  # all of them in one answer, not the first alone
        raise BadVerifyRequest(unknown_ids_line("completions", unknown, "the request's or the server's tasks",
                                                unit="completion")[:300])
    return pairs, ids
