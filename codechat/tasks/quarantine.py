"""Quarantine lists: task ids left out of training and evaluation (`data.exclude`).

The file is one task id per line; `#` starts a comment; blank lines are ignored. `codechat tasks check FILE
--write-quarantine PATH` writes one for the tasks whose reference solution fails or is flaky.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from codechat import CodechatError
from codechat.tasks.model import Task


def read_quarantine(path: str | Path) -> set[str]:
    """The task ids listed in a quarantine file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CodechatError(f"data.exclude: {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CodechatError(f"data.exclude: {p}: cannot read: {e}") from None
    return {line.split("#", 1)[0].strip() for line in text.splitlines()} - {""}


def write_quarantine(path: str | Path, reasons: dict[str, str]) -> None:
    """Write `task id  # reason` lines (sorted by id)."""
    lines = ["# codechat quarantine: task ids left out by data.exclude"]
    lines += [f"{tid}  # {why}" for tid, why in sorted(reasons.items())]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def exclude(tasks: Iterable[Task], ids: set[str]) -> list[Task]:
    """`tasks` without those whose id is in `ids`."""
    return [t for t in tasks if t.task_id not in ids]
