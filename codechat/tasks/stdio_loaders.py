"""Loaders for competitive-programming sets: stdin/stdout tasks, and call-based ones as function tasks.

Formats (detected from the fields of the first record, like the others in loaders.py):
  apps           APPS / TACO records: `question`, `input_output` (JSON; with `fn_name`: call-based tests),
                 `solutions` (JSON list), `starter_code`; also an APPS folder (`question.txt`,
                 `input_output.json`, `solutions.json`, `starter_code.py`) or a folder of such folders
  codecontests   DeepMind CodeContests: `description`, `public_tests` / `private_tests` / `generated_tests`
                 `{input: [], output: []}`, `solutions {language, solution}` (PYTHON3 = 3), `time_limit`
  livecodebench  LiveCodeBench code generation: `question_content`, `public_test_cases` (JSON),
                 `private_test_cases` (base64(zlib(pickle(JSON)))), `starter_code`, `metadata` (`func_name`);
                 test types `stdin` and `functional`
  sandboxfusion  SandboxFusion samples: `content`, `labels`, `test` (JSON list of {input: {stdin}, output:
                 {stdout}}, or base64(zlib(pickle({input_output: JSON}))) for LiveCodeBench)
  deepcoder      DeepCoder's sets: `problem`, `tests` ([{input, output, testtype}] or {inputs, outputs}),
                 `starter_code`
Call-based tests (APPS `fn_name`, LiveCodeBench `functional`) become function tasks: one assert per test,
calling `Solution().NAME(*args)` for a LeetCode-style `class Solution` starter, else `NAME(*args)`, with the
harnesses' usual imports (`from typing import *`, ...) before the program (`metadata["prelude"]`).

Pickled fields are untrusted: they are decoded under size budgets by `pickled.py`, which admits only plain
values (str, bytes, numbers, lists, tuples, dicts, sets, None, bools) and never imports or calls anything.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.pickled import decode_pickled_field
from codechat.tasks.statement import statement_rules
from codechat.tasks.stdio import StdioSpec, io_tests, stdio_prompt

PRELUDE = ("from typing import *\nfrom collections import *\nfrom itertools import *\nfrom functools import *\n"
           "from heapq import *\nfrom bisect import *\nfrom math import *\n"
           "import sys, math, collections, itertools, functools, heapq, bisect, string, re\n")
"""Prepended to call-based programs, as the APPS and LiveCodeBench harnesses do (annotations like List[int])."""

SAME = '''def _codechat_same(got, want, unwrap=False):
    """Equality as the APPS / LiveCodeBench harnesses judge it: tuples as lists; `unwrap`: a one-element [x] also matches x."""
    def plain(x):
        if isinstance(x, (list, tuple)):
            return [plain(i) for i in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x
    got = plain(got)
    return got == want or (unwrap and isinstance(want, list) and len(want) == 1 and got == plain(want[0]))


def _codechat_fn(name):
    """The function under test: LeetCode's `Solution().name` when the program wrote that class, else `name`."""
    try:
        cls = Solution  # bound only when the program defines it
    except NameError:
        cls = None
    if cls is not None and hasattr(cls, name):
        return getattr(cls(), name)
    return globals()[name]
'''
"""Setup of call-based tasks: runs in the judge (the tests call it on the program's returned plain values)."""

def _str(rec: dict, key: str, where: str, required: bool = False) -> str:
    """A text field ('' when absent or null, unless `required`); anything else is a one-line error."""
    if key not in rec or rec[key] is None:
        if required:
            raise TaskFormatError(f"{where}: missing required field '{key}'")
        return ""
    if not isinstance(rec[key], str):
        raise TaskFormatError(f"{where}: field '{key}' must be a string, got {type(rec[key]).__name__}")
    return rec[key]


def _json(text: Any, what: str, where: str) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise TaskFormatError(f"{where}: field '{what}' is not valid JSON: {e}"[:300]) from None


# --- call-based tests -> a function task ----------------------------------------------------------------------
def _method_of(starter: str) -> tuple[str | None, str | None]:
    """(class name, method) of a LeetCode-style starter, or (None, function name), or (None, None)."""
    cls = re.search(r"^class\s+(\w+)", starter, re.M)
    fn = re.search(r"^\s*def\s+(\w+)\s*\(", starter, re.M)
    if cls and fn:
        return cls.group(1), fn.group(1)
    return None, fn.group(1) if fn else None


def _call_target(fn_name: str, starter: str) -> tuple[str, str]:
    """(entry point, expression that calls it) for a call-based test. Without a starter naming a class, an
    answer may still be LeetCode's `class Solution` with the method `fn_name` (verl's APPS ground truths carry
    only `fn_name`): then the tests call `Solution().fn_name`, else the function `fn_name`."""
    cls, method = _method_of(starter)
    if cls and (method == fn_name or not fn_name):
        return cls, f"{cls}().{method}"
    if cls is None and fn_name.isidentifier():
        return fn_name, f"_codechat_fn({fn_name!r})"
    return fn_name, fn_name


def call_task(task_id: str, statement: str, starter: str, fn_name: str, calls: list[tuple[list, Any]],
              where: str, unwrap: bool, solution: str | None = None, **meta) -> Task:
    """A function task whose tests call the program with `args` and compare with `expected` in the judge."""
    if not fn_name and not _method_of(starter)[1]:
        raise TaskFormatError(f"{where}: call-based tests but no function name")
    entry, call = _call_target(fn_name, starter)
    tests = []
    for args, expected in calls:
        if not isinstance(args, list):
            args = [args]
        tests.append(f"assert _codechat_same({call}(*{args!r}), {expected!r}, {unwrap})")
    prompt = (f"{statement.rstrip()}\n\nComplete this starter code (your function is called with the arguments; "
              f"do not read standard input):\n```python\n{starter.rstrip() or 'def ' + fn_name + '(...):'}\n```\n")
    meta = {"prelude": PRELUDE, "starter_code": starter, **meta}
    if solution:
        meta["solution"] = solution
    return Task(task_id, prompt, tests, entry, SAME, None, meta)


def stdio_task(task_id: str, statement: str, tests, where: str, solution: str | None = None,
               timeout_s: float | None = None, **meta) -> Task:
    if solution:
        meta["solution"] = solution
    rules = statement_rules(statement)  # the records carry no checker: the statement says how output is judged
    if rules.multiple_answers:
        meta["multiple_answers"] = True
    spec = StdioSpec(tests, float_tol=rules.float_tol, ignore_case=rules.ignore_case)
    return Task(task_id, stdio_prompt(statement), [], None, "", timeout_s, meta, stdio=spec)


def _starter_in(statement: str) -> str:
    """A starter shown in the statement itself (SandboxFusion's LiveCodeBench prompts): its last code block."""
    blocks = re.findall(r"```python\n(.*?)```", statement, re.S)
    return next((b for b in reversed(blocks) if re.search(r"^(class|def)\s", b, re.M)), "")


def _json_args(text: str, where: str) -> list:
    """LiveCodeBench functional input: one JSON value per line, one line per argument."""
    return [_json(line, "input", where) for line in text.split("\n") if line.strip()]


# --- APPS / TACO ----------------------------------------------------------------------------------------------
def _apps(task_id: str, question: str, io_spec: Any, solutions: Any, starter: str, where: str, **meta) -> Task:
    io_spec = _json(io_spec, "input_output", where) if io_spec else {"inputs": [], "outputs": []}
    if not isinstance(io_spec, dict) or "inputs" not in io_spec or "outputs" not in io_spec:
        raise TaskFormatError(f"{where}: field 'input_output' must hold 'inputs' and 'outputs'")
    sols = _json(solutions, "solutions", where) if solutions else []
    solution = sols[0] if isinstance(sols, list) and sols and isinstance(sols[0], str) else None
    if io_spec.get("fn_name"):
        ins, outs = io_spec["inputs"], io_spec["outputs"]
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise TaskFormatError(f"{where}: 'inputs' and 'outputs' must be lists of the same length")
        calls, unwrap = list(zip(ins, outs)), True
        if all(isinstance(i, str) for i in ins):  # LiveCodeBench's encoding: JSON lines, one per argument
            calls = [(_json_args(i, where), _json(o, "outputs", where)) for i, o in calls]
            unwrap = False
        return call_task(task_id, question, starter or _starter_in(question), str(io_spec["fn_name"]), calls,
                         where, unwrap, solution, **meta)
    return stdio_task(task_id, question, io_tests(io_spec["inputs"], io_spec["outputs"], where), where, solution,
                      **meta)


def from_apps(rec: dict, where: str) -> Task:
    question = _str(rec, "question", where, required=True)
    tid = rec.get("problem_id", rec.get("id", where.rsplit(":", 1)[-1]))
    meta = {k: rec[k] for k in ("difficulty", "url") if rec.get(k)}
    return _apps(str(tid), question, rec.get("input_output"), rec.get("solutions"), _str(rec, "starter_code", where),
                 where, **meta)


def load_apps_dir(path: Path) -> list[Task]:
    """An APPS problem folder, or a folder of them (sorted by name)."""
    dirs = [path] if (path / "question.txt").exists() else sorted(p for p in path.iterdir() if p.is_dir())
    tasks = []
    for d in dirs:
        where = str(d)
        if not (d / "question.txt").is_file():
            raise TaskFormatError(f"{where}: not an APPS problem folder (no question.txt)")

        def read(name: str) -> str:
            try:
                return (d / name).read_text(encoding="utf-8") if (d / name).is_file() else ""
            except (OSError, UnicodeDecodeError) as e:
                raise TaskFormatError(f"{d / name}: cannot read: {e}") from None
        meta = _json(read("metadata.json"), "metadata.json", where) if read("metadata.json") else {}
        meta = {k: meta[k] for k in ("difficulty", "url") if isinstance(meta, dict) and meta.get(k)}
        tasks.append(_apps(d.name, read("question.txt"), read("input_output.json"), read("solutions.json"),
                           read("starter_code.py"), where, **meta))
    if not tasks:
        raise TaskFormatError(f"{path}: no APPS problem folders inside")
    return tasks


# --- CodeContests ---------------------------------------------------------------------------------------------
def from_codecontests(rec: dict, where: str) -> Task:
    description = _str(rec, "description", where, required=True)
    tests = []
    for split in ("public_tests", "private_tests", "generated_tests"):
        part = rec.get(split) or {"input": [], "output": []}
        if not isinstance(part, dict):
            raise TaskFormatError(f"{where}: field '{split}' must be an object with 'input' and 'output'")
        tests += io_tests(part.get("input", []), part.get("output", []), f"{where}: {split}")
    sols = rec.get("solutions") or {}
    solution = None
    if isinstance(sols, dict) and isinstance(sols.get("solution"), list):
        langs = sols.get("language") if isinstance(sols.get("language"), list) else []
        solution = next((s for s, lang in zip(sols["solution"], langs) if lang == 3 and isinstance(s, str)), None)
    limit = rec.get("time_limit")
    timeout = None
    if isinstance(limit, dict) and (limit.get("seconds") or limit.get("nanos")):
        s, ns = limit.get("seconds") or 0, limit.get("nanos") or 0
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in (s, ns)):
            raise TaskFormatError(f"{where}: field 'time_limit' must be {{seconds, nanos}} numbers")
        timeout = float(s) + float(ns) / 1e9
    tid = rec.get("name") or where.rsplit(":", 1)[-1]
    return stdio_task(str(tid), description, tests, where, solution, timeout)


# --- LiveCodeBench --------------------------------------------------------------------------------------------
def _lcb_cases(value: Any, what: str, where: str) -> list:
    if value in (None, ""):
        return []
    if isinstance(value, str) and not value.lstrip().startswith("["):
        value = decode_pickled_field(value, where, what)
    cases = _json(value, what, where)
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "input" in c and "output" in c
                                               for c in cases):
        raise TaskFormatError(f"{where}: field '{what}' must be a list of {{input, output, testtype}}")
    return cases


def _typed_cases(task_id: str, statement: str, starter: str, fn_name: str, cases: list, where: str,
                 **meta) -> Task:
    """LiveCodeBench / DeepCoder cases: all `stdin` -> a stdio task; `functional` -> a function task."""
    kinds = {str(c.get("testtype", "stdin")) for c in cases}
    if kinds - {"stdin", "functional"}:
        raise TaskFormatError(f"{where}: unknown test type(s) {sorted(kinds - {'stdin', 'functional'})}")
    if kinds == {"functional"}:
        calls = [(_json_args(str(c["input"]), where), _json(str(c["output"]), "output", where)) for c in cases]
        return call_task(task_id, statement, starter, fn_name, calls, where, False, **meta)
    if "functional" in kinds:
        raise TaskFormatError(f"{where}: mixes stdin and functional tests")
    return stdio_task(task_id, statement, io_tests([c["input"] for c in cases], [c["output"] for c in cases],
                                                   where), where, **meta)


def from_livecodebench(rec: dict, where: str) -> Task:
    content = _str(rec, "question_content", where, required=True)
    cases = _lcb_cases(rec.get("public_test_cases"), "public_test_cases", where)
    cases += _lcb_cases(rec.get("private_test_cases"), "private_test_cases", where)
    meta = _json(rec.get("metadata") or "{}", "metadata", where)
    fn_name = _str(meta, "func_name", where) if isinstance(meta, dict) else ""
    extra = {k: rec[k] for k in ("platform", "difficulty", "contest_date") if rec.get(k)}
    tid = rec.get("question_id") or where.rsplit(":", 1)[-1]
    return _typed_cases(str(tid), content, _str(rec, "starter_code", where), fn_name, cases, where, **extra)


# --- SandboxFusion samples ------------------------------------------------------------------------------------
def from_sandboxfusion(rec: dict, where: str) -> Task:
    content = _str(rec, "content", where, required=True)
    if "test" not in rec:
        raise TaskFormatError(f"{where}: missing required field 'test'")
    labels = _json(rec.get("labels") or "{}", "labels", where)
    labels = labels if isinstance(labels, dict) else {}
    tid = str(labels.get("task_id") or labels.get("name") or rec.get("id", where.rsplit(":", 1)[-1]))
    test = rec["test"]
    if isinstance(test, str) and not test.lstrip().startswith("["):  # LiveCodeBench: pickled input_output
        decoded = decode_pickled_field(test, where, "test")
        if not isinstance(decoded, dict) or "input_output" not in decoded:
            raise TaskFormatError(f"{where}: decoded test field has no 'input_output'")
        return _apps(tid, content, decoded["input_output"], None, "", where, labels=labels)
    cases = _json(test, "test", where)
    if not isinstance(cases, list):
        raise TaskFormatError(f"{where}: field 'test' must be a list")
    try:
        tests = io_tests([c["input"]["stdin"] for c in cases], [c["output"]["stdout"] for c in cases], where)
    except (KeyError, TypeError):
        raise TaskFormatError(f"{where}: each test must be {{input: {{stdin}}, output: {{stdout}}}}") from None
    return stdio_task(tid, content, tests, where, labels=labels)


# --- DeepCoder ------------------------------------------------------------------------------------------------
def from_deepcoder(rec: dict, where: str) -> Task:
    problem = _str(rec, "problem", where, required=True)
    if "tests" not in rec:
        raise TaskFormatError(f"{where}: missing required field 'tests'")
    tests = rec["tests"]
    if isinstance(tests, str):
        tests = _json(tests, "tests", where)
    if isinstance(tests, dict):
        ins, outs = _pair_lists(tests, where)
        tests = [{"input": i, "output": o} for i, o in zip(ins, outs)]
    if not isinstance(tests, list) or not all(isinstance(t, dict) and "input" in t and "output" in t
                                               for t in tests):
        raise TaskFormatError(f"{where}: field 'tests' must be [{{input, output}}] or {{inputs, outputs}}")
    tid = f"deepcoder-{where.rsplit(':', 1)[-1]}"
    starter = _str(rec, "starter_code", where)
    return _typed_cases(tid, problem, starter, _method_of(starter)[1] or "", tests, where)


def _pair_lists(tests: dict, where: str) -> tuple[list, list]:
    ins, outs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
        raise TaskFormatError(f"{where}: 'tests' must hold lists 'inputs' and 'outputs' of the same length")
    return ins, outs


STDIO_LOADERS: dict[str, Callable[[dict, str], Task]] = {
    "apps": from_apps, "codecontests": from_codecontests, "livecodebench": from_livecodebench,
    "sandboxfusion": from_sandboxfusion, "deepcoder": from_deepcoder,
}


def detect_stdio_format(rec: dict) -> str | None:
    keys = set(rec)
    if {"question", "input_output"} <= keys:
        return "apps"
    if {"description", "public_tests"} <= keys:
        return "codecontests"
    if {"question_content", "public_test_cases"} <= keys:
        return "livecodebench"
    if {"content", "test", "labels"} <= keys:
        return "sandboxfusion"
    if {"problem", "tests"} <= keys:
        return "deepcoder"
    return None
