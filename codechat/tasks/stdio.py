"""stdin/stdout tasks: a program reads a test's input on standard input and is judged on its standard output.

`StdioSpec` rides on a `Task` (`task.stdio`; `task.kind == "stdio"`): the (input, expected output) pairs and
how to compare them. The sandbox runs the program once per test as `__main__`; the comparison (trailing
whitespace trimmed per line, optional float tolerance, or the task's checker) runs in the judge, never in the
program's process (codechat/sandbox/stdio_judge.py).

Our JSONL schema for them (the `codechat` format with `"kind": "stdio"`):
    {"task_id": "sum", "prompt": "...", "kind": "stdio", "tests": [{"input": "1 2\\n", "output": "3\\n"}],
     "float_tol": 0, "checker": "", "solution": "print(sum(map(int, input().split())))"}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codechat.tasks.errors import TaskFormatError

STDIO_INSTRUCTION = ("Write a complete Python program that reads from standard input and writes to standard "
                     "output.")
"""Appended to the prompt of every stdin/stdout task (loaders call `stdio_prompt`)."""


@dataclass
class IOTest:
    input: str
    """The test's standard input."""
    output: str
    """The expected standard output (compared after trimming trailing whitespace per line)."""


@dataclass
class StdioSpec:
    tests: list[IOTest]
    """The (input, expected output) pairs; all must pass."""
    float_tol: float = 0.0
    """> 0: numeric tokens may differ by this much (absolute or relative), e.g. 1e-6 for geometry problems."""
    checker: str = ""
    """Python source defining `check(input, output, expected) -> bool`, run in the judge instead of the
    comparison (a special judge, for problems with several right answers). Written by the task's author."""
    ignore_case: bool = False
    """Words in the output compare case-insensitively (statements that accept `YES`/`yes`/`yEs`)."""


def stdio_prompt(statement: str) -> str:
    """The prompt of a stdin/stdout problem: its statement, then the instruction to use stdin/stdout."""
    return f"{statement.rstrip()}\n\n{STDIO_INSTRUCTION}\n"


def _text(value: Any, what: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):  # some sets store lines
        return "\n".join(value) + "\n"
    raise TaskFormatError(f"{where}: {what} must be a string, got {type(value).__name__}")


def io_tests(inputs: Any, outputs: Any, where: str) -> list[IOTest]:
    """Pair up parallel input/output lists, checking their shapes."""
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TaskFormatError(f"{where}: test inputs and outputs must be lists")
    if len(inputs) != len(outputs):
        raise TaskFormatError(f"{where}: {len(inputs)} test inputs but {len(outputs)} outputs")
    return [IOTest(_text(i, "a test input", where), _text(o, "a test output", where))
            for i, o in zip(inputs, outputs)]


def spec_from_record(rec: dict, where: str) -> StdioSpec:
    """The StdioSpec of a `codechat`-format record with `"kind": "stdio"`."""
    tests = rec.get("tests")
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise TaskFormatError(f"{where}: field 'tests' of a stdio task must be a list of {{input, output}} objects")
    pairs = []
    for t in tests:
        if "input" not in t or "output" not in t:
            raise TaskFormatError(f"{where}: a stdio test needs 'input' and 'output'")
        pairs.append(IOTest(_text(t["input"], "a test input", where), _text(t["output"], "a test output", where)))
    tol = rec.get("float_tol", 0) or 0
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0:
        raise TaskFormatError(f"{where}: field 'float_tol' must be a number >= 0, got {tol!r}")
    checker = rec.get("checker") or ""
    if not isinstance(checker, str):
        raise TaskFormatError(f"{where}: field 'checker' must be Python source (a string)")
    if checker:
        try:
            compile(checker, "<checker>", "exec", dont_inherit=True)
        except SyntaxError as e:
            raise TaskFormatError(f"{where}: field 'checker' does not parse: {e.msg} (line {e.lineno})") from None
    ignore_case = rec.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        raise TaskFormatError(f"{where}: field 'ignore_case' must be true or false, got {ignore_case!r}")
    return StdioSpec(pairs, float(tol), checker, ignore_case)


def spec_to_record(spec: StdioSpec) -> dict:
    """The fields a stdio task adds to our JSONL schema (inverse of `spec_from_record`)."""
    rec: dict = {"kind": "stdio", "tests": [{"input": t.input, "output": t.output} for t in spec.tests]}
    if spec.float_tol:
        rec["float_tol"] = spec.float_tol
    if spec.checker:
        rec["checker"] = spec.checker
    if spec.ignore_case:
        rec["ignore_case"] = True
    return rec
