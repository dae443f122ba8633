"""Loaders for function-test formats: each record becomes a `Task` whose tests are Python asserts.

Formats (detected from the fields of the first record in loaders.py):
  codechat        our JSONL schema (see README): `task_id`, `prompt`, `tests`, optional `entry_point`, `setup`,
                  `timeout_s`, `metadata`, `solution`; `kind: stdio` for a stdin/stdout task
  mbpp            mbpp.jsonl: `text`, `code`, `test_list` (the prompt shows the first test)
  mbpp-sanitized  sanitized-mbpp.json: `prompt`, `code`, `test_list`, `test_imports`
  mbpp-originfmt  evalplus MbppPlus-OriginFmt: MBPP+ tasks from the inputs and expected results baked in their
                  test scripts (tasks/originfmt.py)
  evalplus        MBPP+ / HumanEval+ main files: inputs only, reference and atol kept on the task
  humaneval       `prompt`, `test` with `check(candidate)`, `entry_point`
  leetcode        LeetCodeDataset: `class Solution` answers; the record's `prompt` is a prelude of imports and
                  helpers that the program and the judge both run
"""
from __future__ import annotations

import ast
import math
import re
import warnings
from typing import Callable, Iterable

from codechat.tasks import originfmt
from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.stdio import spec_from_record


def _need(rec: dict, fields: Iterable[str], where: str) -> None:
    for f in fields:
        if f not in rec:
            raise TaskFormatError(f"{where}: missing required field '{f}'")


def _crlf(s: str) -> str:
    return s.replace("\r\n", "\n")


def parse_python(src: str) -> ast.Module:
    """`ast.parse`, quiet about invalid escapes (MBPP code has invalid escapes like '\\d' in plain strings)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(src)


def _entry_point(code: str, tests: list[str]) -> str | None:
    """The function the tests call: the first name called in the first assert that the code defines."""
    defined: list[str] = []
    try:
        defined = [n.name for n in ast.walk(parse_python(code)) if isinstance(n, ast.FunctionDef)]
    except SyntaxError:
        pass
    for t in tests:
        try:
            calls = [n.func.id for n in ast.walk(parse_python(t))
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
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
        tree = parse_python(src)
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


FUNCTION_LOADERS: dict[str, Callable[[dict, str], Task]] = {
    "codechat": _from_codechat, "mbpp": _from_mbpp, "mbpp-sanitized": _from_mbpp_sanitized,
    "mbpp-originfmt": _from_mbpp_originfmt, "evalplus": _from_evalplus, "leetcode": _from_leetcode,
    "humaneval": _from_humaneval,
}
