"""POST /verify: a whole group or step of completions in one request, judged as `codechat verify` judges them.

Request  {"tasks": [record, ...]?, "format": NAME?, "completions": [{"task_id", "completion", "sample_id"?}, ...]}
`tasks` are records in any format codechat loads (detected per record, or forced by `format`); a completion
may also name a task of the set the server loaded at start (`codechat serve --tasks FILE`). Request tasks win
over loaded ones with the same id.
Response {"verdicts": [{"task_id", "sample_id", **Verdict.to_dict()}, ...], "stats": {dedup stats}}
in completion order: the same verdicts as `Verifier.verify_many` in-process (identical copies of a
completion run once), with `tests_passed` / `tests_total` for partial credit.
"""
from __future__ import annotations

from typing import Any

from codechat import CodechatError
from codechat.tasks import Task
from codechat.tasks.loaders import tasks_from_records


class BadVerifyRequest(ValueError):
    """A /verify request that cannot be judged (answered 400 with this one-line reason)."""


def parse(req: Any, loaded: dict[str, Task], max_batch: int) -> tuple[list[tuple[Task, str]], list[dict]]:
    """(task, completion) pairs and the ids to echo, in request order."""
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
    try:
        tasks.update((t.task_id, t) for t in tasks_from_records(records, "tasks", fmt))
    except (CodechatError, ValueError, TypeError, KeyError) as e:
        raise BadVerifyRequest(f"{e}".splitlines()[0][:300] if str(e) else f"tasks: {type(e).__name__}") from None
    pairs, ids = [], []
    for i, c in enumerate(comps):
        if not isinstance(c, dict):
            raise BadVerifyRequest(f"completions[{i}] must be an object")
        tid, text = c.get("task_id"), c.get("completion")
        if not isinstance(text, str):
            raise BadVerifyRequest(f"completions[{i}]: completion must be a string")
        if str(tid) not in tasks:
            raise BadVerifyRequest(f"completions[{i}]: unknown task_id {tid!r}"[:300])
        pairs.append((tasks[str(tid)], text))
        ids.append({"task_id": str(tid), "sample_id": c.get("sample_id")})
    return pairs, ids
