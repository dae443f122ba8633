"""Load task files into `Task`s, detecting the format from the fields of the records.

Formats: function-test sets `codechat` (our JSONL schema, see README), `mbpp`, `mbpp-sanitized`, `mbpp-originfmt`,
`evalplus`, `humaneval`, `leetcode` (function_loaders.py); competitive-programming sets `apps` (also APPS
folders), `codecontests`, `livecodebench`, `sandboxfusion`, `deepcoder` (stdio_loaders.py); answer tasks `gsm8k`,
`math`, `answer` (tasks/answer.py). Files may be JSONL or a JSON array, gzipped or plain, or tables: Parquet files
and `datasets` save_to_disk directories, whose rows may also be verl's RL records or TRL-style prompt/test rows
(tasks/trainer_formats.py); `A+B` loads several sets as one (a mixed code + math training set).
"""
from __future__ import annotations

import gzip
import json
import zlib
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

from codechat.tasks import answer
from codechat.tasks.function_loaders import FUNCTION_LOADERS, parse_python
from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.stdio import spec_to_record
from codechat.tasks.stdio_loaders import STDIO_LOADERS, detect_stdio_format, load_apps_dir
from codechat.tasks.statement import not_unique
from codechat.tasks.trainer_formats import LOADERS as TRAINER_LOADERS, SYSTEM_TURN, detect_trainer_format, \
    is_table, read_table

FORMATS = [*FUNCTION_LOADERS, *STDIO_LOADERS, *answer.LOADERS, *TRAINER_LOADERS]


def read_records(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """Read (line number, record) pairs from a JSONL or JSON-array file, gzip or plain."""
    path = Path(path)
    if not path.exists():
        raise TaskFormatError(f"{path}: no such file")
    if path.is_dir():
        raise TaskFormatError(f"{path}: is a directory, expected a task file")
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz" and raw[:2] != b"\x1f\x8b":
            raise TaskFormatError(f"{path}: named .gz but not gzip-compressed (no gzip header)")
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
        raise TaskFormatError(f"{path}: cannot read: {e}") from None
    if not text.strip():
        raise TaskFormatError(f"{path}: empty file, no tasks")
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskFormatError(f"{path}:{e.lineno}: malformed JSON: {e.msg}") from None
        records = list(enumerate(data, 1))
    elif (whole := _one_object(text)) is not None:  # one pretty-printed JSON object (AlphaCodium's example)
        records = [(1, whole)]
    else:
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((lineno, json.loads(line)))
            except json.JSONDecodeError as e:
                raise TaskFormatError(f"{path}:{lineno}: malformed JSON: {e.msg}") from None
    for where, rec in records:
        if not isinstance(rec, dict):
            raise TaskFormatError(f"{path}:{where}: expected a JSON object, got {type(rec).__name__}")
    if not records:
        raise TaskFormatError(f"{path}: empty file, no tasks")
    return records


def _one_object(text: str) -> dict | None:
    """The record of a file holding one JSON object over several lines, else None (JSONL)."""
    first = text.lstrip().split("\n", 1)[0]
    if not first.startswith("{"):
        return None
    try:
        json.loads(first)
        return None  # the first line is a whole record: JSONL
    except json.JSONDecodeError:
        pass
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def detect_format(rec: dict[str, Any]) -> str | None:
    keys = set(rec)
    if {"base_input", "plus_input"} <= keys:
        return "evalplus"
    if {"code", "test_list", "test"} <= keys:
        return "mbpp-originfmt"
    if {"code", "test_list", "test_imports"} <= keys:
        return "mbpp-sanitized"
    if {"text", "code", "test_list"} <= keys:
        return "mbpp"
    if {"prompt", "test", "entry_point", "completion", "query"} <= keys:
        return "leetcode"
    if {"prompt", "test", "entry_point"} <= keys:
        return "humaneval"
    if (trainer := detect_trainer_format(rec)) is not None:  # verl records; TRL rows: a chat prompt or no task_id
        return trainer
    if {"prompt", "tests"} <= keys:
        return "codechat"
    # APPS, CodeContests, LiveCodeBench, SandboxFusion, DeepCoder; then GSM8K, MATH, our answer JSONL
    return detect_stdio_format(rec) or answer.detect(rec)


_LOADERS: dict[str, Callable[[dict, str], Task]] = {
    **FUNCTION_LOADERS,
    **STDIO_LOADERS,
    **answer.LOADERS,
    **TRAINER_LOADERS,
}


def _check_tests_parse(task: Task, where: str) -> None:
    for i, test in enumerate(task.tests, 1):
        try:
            parse_python(test)
        except SyntaxError as e:
            raise TaskFormatError(f"{where}: task '{task.task_id}': test {i} is not valid Python ({e.msg}, line "
                                  f"{e.lineno}): {test.strip()[:60]!r}") from None


def load_tasks_with_format(path: str | Path, fmt: str | None = None) -> tuple[list[Task], str]:
    """Load every task in `path`; returns (tasks, format). `fmt` forces a format instead of detecting it."""
    if fmt is not None and fmt not in _LOADERS:
        raise TaskFormatError(f"{path}: unknown format '{fmt}' (valid: {', '.join(FORMATS)})")
    table = is_table(Path(path))
    if Path(path).is_dir() and not table and fmt in (None, "apps"):  # an APPS problem folder, or a folder of them
        return _unique(load_apps_dir(Path(path)), path), "apps"
    records = read_table(Path(path)) if table else read_records(path)
    first_line, first = records[0]
    if fmt is None:
        fmt = detect_format(first)
        if fmt is None:
            raise TaskFormatError(
                f"{path}:{first_line}: unknown format: fields {sorted(first)} match none of {', '.join(FORMATS)}")
    loader, tasks, seen = _LOADERS[fmt], [], {}
    for lineno, rec in records:
        where = f"{path}:{lineno}"
        task = loader(rec, where)
        task.metadata.setdefault("source", fmt)
        if fmt in FORMATS:  # the formats whose tests are Python: a test that does not parse is the file's fault
            _check_tests_parse(task, where)
        if task.task_id in seen:
            raise TaskFormatError(f"{where}: duplicate task_id '{task.task_id}' (first at line {seen[task.task_id]})")
        seen[task.task_id] = lineno
        tasks.append(task)
    weak = sum("base_input" not in t.metadata for t in tasks) if fmt == "mbpp-originfmt" else 0
    if weak:
        warnings.warn(f"{path}: {weak} of {len(tasks)} MBPP+ OriginFmt tests are not in the inputs/results shape, "
                      f"so they run as their own script: weaker tests (no per-input limits, no base/plus scores)",
                      stacklevel=2)
    system = sum(SYSTEM_TURN in t.metadata for t in tasks)
    if system:
        warnings.warn(f"{path}: {system} of {len(tasks)} chat prompts carry a system turn, which codechat does not pose "
                      f"per task: set model.system_prompt to it to keep it", stacklevel=2)
    n = sum(map(not_unique, tasks))
    if n:
        warnings.warn(f"{path}: {n} of {len(tasks)} tasks accept any of several answers and have no checker, so "
                      f"comparing output misjudges correct programs; training leaves them out "
                      f"(data.multiple_answers=keep keeps them)", stacklevel=2)
    return tasks, fmt


def _unique(tasks: list[Task], path) -> list[Task]:
    seen: set[str] = set()
    for t in tasks:
        if t.task_id in seen:
            raise TaskFormatError(f"{path}: duplicate task_id '{t.task_id}'")
        seen.add(t.task_id)
        t.metadata.setdefault("source", "apps")
    return tasks


def save_tasks(tasks: Iterable[Task], path: str | Path) -> None:
    """Write tasks in our own JSONL schemas (`codechat` for code tasks, `answer` for answer tasks)."""
    with open(path, "w", encoding="utf-8") as f:
        for t in tasks:
            if t.kind == answer.KIND:
                f.write(json.dumps(answer.to_record(t), ensure_ascii=False) + "\n")
                continue
            rec = {"task_id": t.task_id, "prompt": t.prompt, "tests": t.tests, "entry_point": t.entry_point,
                   "setup": t.setup, "timeout_s": t.timeout_s}
            meta = dict(t.metadata)
            if "solution" in meta:
                rec["solution"] = meta.pop("solution")
            meta.pop("source", None)
            rec["metadata"] = meta
            if t.stdio is not None:
                rec.update(spec_to_record(t.stdio))
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def tasks_from_records(records: Iterable[dict], where: str = "records", fmt: str | None = None) -> list[Task]:
    """Tasks from records already in memory (a request body, a dataset row), each in any format `load_tasks`
    reads, detected per record unless `fmt` forces one; `where` names the source in errors."""
    if fmt is not None and fmt not in _LOADERS:
        raise TaskFormatError(f"{where}: unknown format '{fmt}' (valid: {', '.join(FORMATS)})")
    tasks = []
    for i, rec in enumerate(records):
        at = f"{where}[{i}]"
        if not isinstance(rec, dict):
            raise TaskFormatError(f"{at}: a task record must be a JSON object, got {type(rec).__name__}")
        kind = fmt or detect_format(rec)
        if kind is None:
            raise TaskFormatError(f"{at}: unknown format: fields {sorted(rec)} match none of {', '.join(FORMATS)}")
        task = _LOADERS[kind](rec, at)
        task.metadata.setdefault("source", kind)
        if kind in FORMATS:
            _check_tests_parse(task, at)
        tasks.append(task)
    return tasks
