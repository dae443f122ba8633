"""Reading JSONL files written by codechat (metrics, rollouts, audits): one reader, one kind of error.

    for where, rec in read_jsonl(path, what="rollout file"):    # where = "path:lineno", rec = a dict
        ...

A missing file, a line that is not JSON or not an object fails with one line naming the file and the line
(`CodechatError`); blank lines are skipped. Task files have their own loader (tasks/loaders.py), which knows
their formats. User-written files whose bad lines are reported and skipped, not fatal (completions, patches),
go through `scan_jsonl`:

    for lineno, rec, why in scan_jsonl(path, what="completions file"):   # rec None and why set: a bad line
        ...
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from codechat import CodechatError


def read_jsonl(path: str | Path, what: str = "JSONL file") -> Iterator[tuple[str, dict]]:
    """("path:lineno", record) for every non-blank line of `path`; CodechatError naming the line on bad input."""
    p = Path(path)
    if not p.is_file():
        raise CodechatError(f"{p}: no such {what}")
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{p}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CodechatError(f"{where}: {what} is not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise CodechatError(f"{where}: invalid JSON in {what}: {e.msg}") from None
            except RecursionError:
                raise CodechatError(f"{where}: invalid JSON in {what}: nested too deeply") from None
            if not isinstance(rec, dict):
                raise CodechatError(f"{where}: expected a JSON object in {what}, got {type(rec).__name__}")
            yield where, rec


def read_records(path: str | Path, what: str = "JSONL file") -> list[dict]:
    """All records of `path` (see read_jsonl)."""
    return [rec for _, rec in read_jsonl(path, what)]


def scan_jsonl(path: str | Path, what: str = "file") -> Iterator[tuple[int, dict | None, str]]:
    """(lineno, record, "") for every non-blank line that is a JSON object; (lineno, None, why) for one that is
    not, `why` one line starting "malformed line". Bytes that are not UTF-8 are replaced, not fatal; a missing
    file is a CodechatError."""
    p = Path(path)
    if not p.is_file():
        raise CodechatError(f"{p}: no such {what}")
    with open(p, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                yield lineno, None, f"malformed line: {e}"
                continue
            except RecursionError:
                yield lineno, None, "malformed line: nested too deeply"
                continue
            if isinstance(rec, dict):
                yield lineno, rec, ""
            else:
                yield lineno, None, f"malformed line: expected a JSON object, got {type(rec).__name__}"


def unknown_ids_line(path: str | Path, unknown: list[tuple[int, str]], tasks: str, unit: str = "line") -> str | None:
    """One line for every record of `path` whose task id is not in the task set `tasks` (`unknown`: (position,
    id) pairs; `unit` names a position): how many records, how many distinct ids and the first five, so that no
    unknown id hides behind a cap on per-line warnings. None when there are none."""
    if not unknown:
        return None
    ids = list(dict.fromkeys(tid for _, tid in unknown))
    shown = ", ".join(repr(i) for i in ids[:5]) + (f" and {len(ids) - 5} more ({len(ids)} distinct)"
                                                  if len(ids) > 5 else "")
    where = f"{unit} {unknown[0][0]}" if len(unknown) == 1 else f"{len(unknown)} {unit}s, first {unknown[0][0]}"
    return f"{path}: unknown task_id {shown} ({where}): not in {tasks}"
