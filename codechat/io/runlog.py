"""Read a run's JSONL logs (metrics.jsonl, rollouts.jsonl, audit.jsonl) while a run may still be writing them.

A last line without its newline that does not parse is a record being written (or cut by a kill): it is left
out with a warning on stderr. A malformed line anywhere else is damage: a CodechatError names file and line.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from codechat import CodechatError


def read_jsonl(path: str | Path, what: str = "log") -> list[dict]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise CodechatError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines):  # no newline after it: still being written, or cut short by a kill
                print(f"warning: {path}:{i}: incomplete last line left out (a run writing it, or killed "
                      f"mid-write)", file=sys.stderr)
                break
            raise CodechatError(f"{path}:{i}: malformed {what} line ({e.msg})") from None
        if not isinstance(rec, dict):
            raise CodechatError(f"{path}:{i}: malformed {what} line (expected a JSON object)")
        out.append(rec)
    return out


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise CodechatError(f"{run_dir}: no metrics.jsonl (not a codechat run directory?)")
    return read_jsonl(path, "metrics")
