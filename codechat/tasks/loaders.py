"""Load task files into `Task`s, detecting the format from the fields of the records.

Formats: `codechat` (our JSONL schema, see README), `mbpp` (mbpp.jsonl), `mbpp-sanitized` (sanitized-mbpp.json),
`mbpp-originfmt` (evalplus MbppPlus-OriginFmt: loaded as MBPP+ tasks from the inputs and expected results baked
in its test scripts, tasks/originfmt.py), `evalplus` (MBPP+ / HumanEval+ main files: inputs only, reference and
atol kept on the task), `humaneval` (prompt/test/entry_point with
`check(candidate)`), `leetcode` (LeetCodeDataset: `class Solution` answers, the record's `prompt` is a prelude of
imports and helpers that the program and the judge both run); competitive-programming sets `apps` (also APPS folders), `codecontests`, `livecodebench`,
`sandboxfusion`, `deepcoder` (stdio_loaders.py); answer tasks `gsm8k`, `math`, `answer` (tasks/answer.py). Files
may be JSONL or a JSON array, gzipped or plain, or tables: Parquet files and `datasets` save_to_disk directories,
whose rows may also be verl's RL records or TRL-style prompt/test rows (tasks/trainer_formats.py); `A+B` loads
several sets as one (a mixed code + math training set).
"""
from __future__ import annotations

import ast
import gzip
import json
import math
import re
import zlib
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

from codechat.tasks import answer, originfmt
from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.stdio import spec_from_record, spec_to_record
from codechat.tasks.stdio_loaders import STDIO_LOADERS, detect_stdio_format, load_apps_dir
from codechat.tasks.statement import not_unique
from codechat.tasks.trainer_formats import LOADERS as TRAINER_LOADERS, SYSTEM_TURN, detect_trainer_format, \
    is_table, read_table

FORMATS = ["codechat", "mbpp", "mbpp-sanitized", "mbpp-originfmt", "evalplus", "leetcode", "humaneval", *STDIO_LOADERS,
           *answer.LOADERS, *TRAINER_LOADERS]


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


def _need(rec: dict, fields: Iterable[str], where: str) -> None:
    for f in fields:
        if f not in rec:
            raise TaskFormatError(f"{where}: missing required field '{f}'")


def _crlf(s: str) -> str:
    return s.replace("\r\n", "\n")


def _parse(src: str) -> ast.Module:
    with warnings.catch_warnings():  # MBPP code has invalid escapes like '\d' in plain strings
        warnings.simplefilter("ignore")
        return ast.parse(src)


def _entry_point(code: str, tests: list[str]) -> str | None:
    """The function the tests call: the first name called in the first assert that the code defines."""
    defined: list[str] = []
    try:
        defined = [n.name for n in ast.walk(_parse(code)) if isinstance(n, ast.FunctionDef)]
    except SyntaxError:
        pass
    for t in tests:
        try:
            calls = [n.func.id for n in ast.walk(_parse(t)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        except SyntaxError:
            continue
        for name in calls:
            if name in defined or not defined:
                return name
    return defined[-1] if defined else None


def _mbpp_prompt(text: str, tests: list[str]) -> str:
    # The MBPP paper's prompt shows the tests so the model knows the function name; we show the first one.
    example = f"\nYour code should pass this test:\n{tests[0]}" if tests else ""
    return f"{text.strip()}{example}\n"


def _split_asserts(src: str) -> tuple[str, list[str]]:
    """Split test code into (setup, tests): each top-level statement a test of its own so each assert counts
    alone, except imports, which go to the setup (an `import math` line is no test that can pass)."""
    try:
        tree = _parse(src)
    except SyntaxError:
        return "", [src]
    setup, tests = [], []
    for node in tree.body:
        seg = ast.get_source_segment(src, node) or ""
        (setup if isinstance(node, (ast.Import, ast.ImportFrom)) else tests).append(seg)
    return "\n".join(setup), tests


def _from_codechat(rec: dict, where: str) -> Task:
    _need(rec, ["task_id", "prompt", "tests"], where)
    if rec.get("kind", "function") not in ("function", "stdio"):
        raise TaskFormatError(f"{where}: field 'kind' must be 'function' or 'stdio', got {rec.get('kind')!r}")
    tests = rec["tests"]
    if isinstance(tests, str):
        raise TaskFormatError(f"{where}: field 'tests' must be a list of strings, got a string (write [\"...\"])")
    if rec.get("metadata") is not None and not isinstance(rec["metadata"], dict):
        raise TaskFormatError(f"{where}: field 'metadata' must be a JSON object, got "
                              f"{type(rec['metadata']).__name__}")
    meta = dict(rec.get("metadata") or {})
    if rec.get("solution"):
        meta["solution"] = rec["solution"]
    timeout = rec.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                or not math.isfinite(timeout) or timeout <= 0):
        raise TaskFormatError(f"{where}: field 'timeout_s' must be a positive number, got {timeout!r}")
    if rec.get("kind") == "stdio":
        return Task(str(rec["task_id"]), str(rec["prompt"]), [], None, "", timeout, meta,
                    stdio=spec_from_record(rec, where))
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise TaskFormatError(f"{where}: field 'tests' must be a list of strings")
    return Task(str(rec["task_id"]), str(rec["prompt"]), tests, rec.get("entry_point"), rec.get("setup") or "",
                timeout, meta)


def _from_mbpp(rec: dict, where: str) -> Task:
    _need(rec, ["task_id", "text", "code", "test_list"], where)
    code, tests = _crlf(rec["code"]), list(rec["test_list"])
    meta = {"solution": code, "challenge_tests": rec.get("challenge_test_list") or []}
    return Task(str(rec["task_id"]), _mbpp_prompt(rec["text"], tests), tests, _entry_point(code, tests),
                _crlf(rec.get("test_setup_code") or ""), None, meta)


def _from_mbpp_sanitized(rec: dict, where: str) -> Task:
    _need(rec, ["task_id", "prompt", "code", "test_list"], where)
    code, tests = _crlf(rec["code"]), list(rec["test_list"])
    return Task(str(rec["task_id"]), _mbpp_prompt(rec["prompt"], tests), tests, _entry_point(code, tests),
                "\n".join(rec.get("test_imports") or []), None, {"solution": code})


def _from_mbpp_originfmt(rec: dict, where: str) -> Task:
    """An MBPP+ task, as the main MBPP+ files give it: the shown asserts are its tests, the script's inputs and
    baked results its base/plus data (tasks/originfmt.py); a script of another shape runs as one test."""
    _need(rec, ["task_id", "prompt", "code", "test"], where)
    code, shown = _crlf(rec["code"]), list(rec.get("test_list") or [])
    setup, prompt = "\n".join(rec.get("test_imports") or []), _mbpp_prompt(rec["prompt"], shown)
    meta = {"solution": code, "shown_tests": shown}
    cases = originfmt.parse_cases(rec["test"], shown) if isinstance(rec["test"], str) else None
    if cases is None or not shown:
        return Task(str(rec["task_id"]), prompt, [originfmt.strict_script(str(rec["test"]))],
                    _entry_point(code, shown), setup, None, meta)
    meta.update({"base_input": cases.inputs[:cases.n_base], "plus_input": cases.inputs[cases.n_base:],
                 "atol": cases.atol})
    if cases.expected is not None:
        meta["expected"] = cases.expected
    if cases.oracle:
        meta["oracle"] = cases.oracle
    return Task(str(rec["task_id"]), prompt, shown, cases.entry_point, setup, None, meta)


def _from_evalplus(rec: dict, where: str) -> Task:
    _need(rec, ["task_id", "prompt", "entry_point", "canonical_solution", "base_input", "plus_input"], where)
    prompt = rec["prompt"]
    is_mbpp = str(rec["task_id"]).startswith("Mbpp/")
    # MBPP+ solutions are whole programs; HumanEval+ solutions continue the prompt.
    solution = rec["canonical_solution"] if is_mbpp else prompt + rec["canonical_solution"]
    setup = ""
    if rec.get("assertion"):
        setup, tests = _split_asserts(rec["assertion"])
    elif rec.get("test"):
        tests = [rec["test"] + f"\ncheck({rec['entry_point']})\n"]
    else:
        tests = []
    meta = {"solution": solution, "base_input": rec["base_input"], "plus_input": rec["plus_input"],
            "atol": rec.get("atol", 0) or 0, "contract": rec.get("contract", "")}
    return Task(str(rec["task_id"]), prompt, tests, rec["entry_point"], setup, None, meta)


def _from_humaneval(rec: dict, where: str) -> Task:
    _need(rec, ["task_id", "prompt", "test", "entry_point"], where)
    meta = {}
    prelude = _code_prelude(rec["prompt"], rec["entry_point"])
    if prelude:  # the official harness runs prompt + completion + test: the prompt's code comes first
        meta["prelude"] = prelude
    if rec.get("canonical_solution"):
        meta["solution"] = (rec["prompt"] if not prelude else "") + rec["canonical_solution"]
    tests = [rec["test"] + f"\ncheck({rec['entry_point']})\n"]
    return Task(str(rec["task_id"]), rec["prompt"], tests, rec["entry_point"], "", None, meta)


def _code_prelude(prompt: str, entry_point: str) -> str:
    """A HumanEval-format prompt that is code (imports, helper classes) but does not define the entry point: the
    prelude the program and the tests run after (empty when the prompt is prose or defines the entry point, whose
    prelude the verifier takes from the prompt itself)."""
    head = re.match(r"[A-Za-z_]\w*", str(entry_point))
    if not prompt.strip() or head is None:
        return ""
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return ""
    code = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign)
    if not any(isinstance(n, code) for n in tree.body):
        return ""  # (a docstring or comment alone is no prelude)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, code[2:5])}
    return "" if head.group(0) in defined else prompt.rstrip("\n") + "\n"


def _from_leetcode(rec: dict, where: str) -> Task:
    """LeetCodeDataset: the model sees `query` (statement + starter code); `prompt` is the harness prelude
    (`from typing import *`, ListNode, tree_node, ...), run before the program and, authoritative, in the judge."""
    _need(rec, ["task_id", "prompt", "test", "entry_point", "query"], where)
    for f in ("prompt", "test", "entry_point", "query"):
        if not isinstance(rec[f], str):
            raise TaskFormatError(f"{where}: field '{f}' must be a string, got {type(rec[f]).__name__}")
    meta = {"prelude": rec["prompt"]}
    if isinstance(rec.get("completion"), str) and rec["completion"].strip():
        meta["solution"] = rec["completion"]
    info = rec.get("meta") if isinstance(rec.get("meta"), dict) else {}
    for k in ("difficulty", "question_id", "lang_code"):
        if info.get(k) is not None:
            meta[k] = info[k]
    tests = [rec["test"] + f"\ncheck({rec['entry_point']})\n"]
    return Task(str(rec["task_id"]), rec["query"], tests, rec["entry_point"], "", None, meta)


_LOADERS: dict[str, Callable[[dict, str], Task]] = {
    "codechat": _from_codechat, "mbpp": _from_mbpp, "mbpp-sanitized": _from_mbpp_sanitized,
    "mbpp-originfmt": _from_mbpp_originfmt, "evalplus": _from_evalplus, "leetcode": _from_leetcode, "humaneval": _from_humaneval,
    **STDIO_LOADERS,
    **answer.LOADERS,
    **TRAINER_LOADERS,
}


def _check_tests_parse(task: Task, where: str) -> None:
    for i, test in enumerate(task.tests, 1):
        try:
            _parse(test)
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
