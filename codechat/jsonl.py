"""Reading JSONL files written by codechat (metrics, rollouts, audits): one reader, one kind of error.

    for where, rec in read_jsonl(path, what="rollout file"):    # where = "path:lineno", rec = a dict
        ...

A missing file, a line that is not JSON or not an object fails with one line naming the file and the line
(`CodechatError`); blank lines are skipped. Task files have their own loader (tasks/loaders.py), which knows
their formats; readers of user-written completion files that must skip bad lines keep their own loop.
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
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise CodechatError(f"{where}: invalid JSON in {what}: {e.msg}") from None
            if not isinstance(rec, dict):
                raise CodechatError(f"{where}: expected a JSON object in {what}, got {type(rec).__name__}")
            yield where, rec


def read_records(path: str | Path, what: str = "JSONL file") -> list[dict]:
    """All records of `path` (see read_jsonl)."""
    return [rec for _, rec in read_jsonl(path, what)]
