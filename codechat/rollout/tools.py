"""The agent's tools on a repository workspace, and the text format of a call and of its result.

A model turn ends with one call. By default (`agent.call_format` = json; call_formats.py has the registry and a
compact format for models trained from scratch) it is in the Qwen/Hermes format (what `<tool_call>`-aware chat
templates emit):

    <tool_call>
    {"name": "edit", "arguments": {"path": "pkg/stats.py", "old": "lo < x", "new": "lo <= x"}}
    </tool_call>

The environment answers with `<tool_response>\\nTEXT\\n</tool_response>`. TEXT starts with `ok` or `error:` on
its first line, and is cut to `AgentConfig.tool_output_chars` characters (the cut says how much was dropped).
Tools (`TOOLS` has each one's parameters; `tool_schemas()` gives JSON schemas for `apply_chat_template(tools=)`):
    list_files(path=".")              files under a directory
    read_file(path, start=1, end=0)   numbered lines of a file (end 0 = to the end)
    search(pattern, path=".")         `path:line: text` for each match of a regex (or literal text)
    write_file(path, content)         create or replace a file
    edit(path, old, new)              replace the one occurrence of `old` (0 or 2+ occurrences: error)
    replace_function(path, name, new) replace the whole definition of function or class `name` (`Cls.method` for
                                      a method; decorators included) by `new`: no text of the file to copy
    run_tests(paths=[])               the task's visible tests (or a subset) under the sandbox
    run(code="", module="", args=[])  a Python snippet or `python -m module args` in the workspace, sandboxed
    submit()                          end the episode; the workspace's diff is judged
Edits of protected paths (tests, conftest.py) are refused and counted; they would be discarded anyway.
"""
from __future__ import annotations

import ast
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from codechat.config import AgentConfig
from codechat.sandbox.workspace import Workspace, WorkspaceError, run_isolated, safe_path
from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import ALWAYS_PROTECTED, run_tests
from codechat.verifier.repo_rules import drop_reason
from codechat.verifier.repo_suite import path_directives, run_suite

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESULT_OPEN, RESULT_CLOSE = "<tool_response>", "</tool_response>"
MAX_WRITE_CHARS, MAX_PATTERN_CHARS = 200_000, 200
SEARCH_TIMEOUT_S = 2.0  # one search call, all files: `re` cannot be interrupted, `regex` takes a timeout

TOOLS: dict[str, dict[str, tuple[str, bool, str]]] = {
    # name: {parameter: (json type, required, description)}
    "list_files": {"path": ("string", False, "directory, relative to the repository root")},
    "read_file": {"path": ("string", True, "file to read"), "start": ("integer", False, "first line (1-based)"),
                  "end": ("integer", False, "last line, 0 = end of file")},
    "search": {"pattern": ("string", True, "regular expression or literal text"),
               "path": ("string", False, "directory or file to search")},
    "write_file": {"path": ("string", True, "file to create or replace"), "content": ("string", True, "full text")},
    "edit": {"path": ("string", True, "file to change"), "old": ("string", True, "exact text to replace, once"),
             "new": ("string", True, "replacement text")},
    "replace_function": {"path": ("string", True, "file to change"),
                         "name": ("string", True, "function or class, or Class.method"),
                         "new": ("string", True, "the whole new definition")},
    "run_tests": {"paths": ("array", False, "visible test files or node ids; empty = all visible tests")},
    "run": {"code": ("string", False, "Python source to run"), "module": ("string", False, "module for python -m"),
            "args": ("array", False, "arguments")},
    "submit": {},
}
DESCRIPTIONS = {"list_files": "List the files of the repository.", "read_file": "Read a file with line numbers.",
                "search": "Search the repository.", "write_file": "Create or overwrite a file.",
                "edit": "Replace one exact occurrence of a text in a file.",
                "replace_function": "Replace a whole function or class definition.",
                "run_tests": "Run the visible tests.", "run": "Run Python code in the repository.",
                "submit": "Submit the current state of the repository as the fix."}


@dataclass
class ToolCall:
    name: str
    """Tool name (one of TOOLS), or "" when the call could not be parsed."""
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    """Why the call is malformed ("" when it is well-formed)."""


@dataclass
class ToolResult:
    text: str
    """What the environment appends (inside <tool_response>), already capped."""
    ok: bool
    """False for a malformed call, a refused edit, a failing tool."""
    protected_attempt: bool = False
    """The call tried to change a protected path."""
    ran_tests: bool = False
    """The call ran tests (run_tests)."""
    submitted: bool = False
    duration_s: float = 0.0


def tool_schemas() -> list[dict]:
    """OpenAI-style function schemas (for chat templates that take `tools=`)."""
    out = []
    for name, params in TOOLS.items():
        props = {p: {"type": t, "description": d} for p, (t, _, d) in params.items()}
        out.append({"type": "function", "function": {"name": name, "description": DESCRIPTIONS[name], "parameters": {
            "type": "object", "properties": props, "required": [p for p, (_, r, _) in params.items() if r]}}})
    return out


def tool_help() -> str:
    """The tool list as plain text for models without a tool-aware chat template."""
    lines = []
    for name, params in TOOLS.items():
        args = ", ".join(f"{p}{'' if r else '?'}" for p, (_, r, _) in params.items())
        lines.append(f"- {name}({args}): {DESCRIPTIONS[name]}")
    return "\n".join(lines)


_TYPES = {"string": str, "integer": int, "array": list}


def parse_tool_call(text: str) -> ToolCall:
    """The first `<tool_call>{json}</tool_call>` of a model turn, validated against TOOLS."""
    start = text.find(CALL_OPEN)
    if start < 0:
        return ToolCall("", error=f"no tool call: end your turn with {CALL_OPEN}{{\"name\": ..., \"arguments\": "
                                  f"{{...}}}}{CALL_CLOSE}")
    end = text.find(CALL_CLOSE, start)
    body = text[start + len(CALL_OPEN): end if end >= 0 else len(text)].strip()
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as e:
        return ToolCall("", error=f"tool call is not valid JSON: {str(e)[:200]}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall("", error='tool call must be {"name": TOOL, "arguments": {...}}')
    return check_call(obj["name"], obj.get("arguments", {}))


def check_call(name: str, args: Any) -> ToolCall:
    """A parsed call validated against TOOLS: known tool, known arguments of the right types, required ones."""
    if name not in TOOLS:
        return ToolCall(name, error=f"unknown tool {name[:40]!r} (tools: {', '.join(TOOLS)})")
    if not isinstance(args, dict):
        return ToolCall(name, error="arguments must be an object")
    for p, v in args.items():
        if p not in TOOLS[name]:
            return ToolCall(name, error=f"{name}: unknown argument {str(p)[:40]!r}")
        want = _TYPES[TOOLS[name][p][0]]
        if not isinstance(v, want) or isinstance(v, bool):
            return ToolCall(name, error=f"{name}: argument {p!r} must be a {TOOLS[name][p][0]}")
    for p, (_, required, _) in TOOLS[name].items():
        if required and p not in args:
            return ToolCall(name, error=f"{name}: missing argument {p!r}")
    return ToolCall(name, args)


def format_call(tool: str, /, **arguments) -> str:
    """The text of a call, as the model should write it (scripted policies and expert transcripts use this).
    `tool` is positional-only: replace_function has an argument called `name`."""
    body = json.dumps({"name": tool, "arguments": arguments}).replace("</", "<\\/")  # a value's </tool_call>
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


class ToolBox:
    """The tools of one episode, bound to its workspace and task."""

    def __init__(self, task: RepoTask, workspace: Workspace, cfg: AgentConfig, hide_paths: tuple[str, ...] = (),
                 env=None, warm=None):
        """env: the task's test environment (RepoJudge.env_for), whose interpreter run_tests uses; warm: the
        judge's warm runner (RepoJudge.warm) run_tests forks from, or None."""
        self.task, self.ws, self.cfg, self.hide_paths, self.env = task, workspace, cfg, hide_paths, env
        self.warm = warm

    def call(self, call: ToolCall) -> ToolResult:
        t0 = time.monotonic()
        if call.error:
            res = ToolResult(f"error: {call.error}", False)
        else:
            try:
                res = getattr(self, f"_{call.name}")(**call.arguments)
            except WorkspaceError as e:
                res = ToolResult(f"error: {e}", False)
        res.text = cap(res.text, self.cfg.tool_output_chars)
        res.duration_s = time.monotonic() - t0
        return res

    def _protected(self, path: str) -> bool:
        """By the normalised path (`conftest.py/.` is conftest.py), with the rules the final judgement drops
        edits by (`repo_rules.drop_reason`): what the judge would discard never reaches the episode's runs."""
        path = safe_path(path)
        return self.task.is_protected(path) or path.rsplit("/", 1)[-1] in ALWAYS_PROTECTED \
            or drop_reason(path, self.task.is_protected, self.ws.exists) is not None

    def _list_files(self, path: str = ".") -> ToolResult:
        files = self.ws.listing(path)
        return ToolResult("ok\n" + "\n".join(files), True)

    def _read_file(self, path: str, start: int = 1, end: int = 0) -> ToolResult:
        lines = self.ws.read(path).splitlines()
        start = max(1, start)
        end = len(lines) if end <= 0 else min(end, len(lines))
        body = "\n".join(f"{i:4d} {lines[i - 1]}" for i in range(start, end + 1))
        return ToolResult(f"ok {path} lines {start}-{end} of {len(lines)}\n{body}", True)

    def _search(self, pattern: str, path: str = ".") -> ToolResult:
        if not pattern or len(pattern) > MAX_PATTERN_CHARS:
            return ToolResult(f"error: pattern must have 1-{MAX_PATTERN_CHARS} characters", False)
        try:
            rx = regex.compile(pattern)
        except (regex.error, ValueError, OverflowError):
            rx = regex.compile(regex.escape(pattern))
        files = [path] if self.ws.exists(path) else self.ws.listing(path)
        hits = []
        deadline = time.monotonic() + SEARCH_TIMEOUT_S
        try:
            for f in files:
                for i, line in enumerate(self.ws.read(f).splitlines(), 1):
                    if rx.search(line[:1000], timeout=max(1e-3, deadline - time.monotonic())):
                        hits.append(f"{f}:{i}: {line.strip()[:200]}")
        except TimeoutError:
            return ToolResult(f"error: search took over {SEARCH_TIMEOUT_S:g}s (a pattern that backtracks); "
                              f"use a simpler pattern", False)
        return ToolResult(f"ok {len(hits)} matches\n" + "\n".join(hits[:100]), True)

    def _write_file(self, path: str, content: str) -> ToolResult:
        if self._protected(path):
            return ToolResult(f"error: {path} is protected (tests and test configuration cannot be changed)", False,
                              protected_attempt=True)
        if len(content) > MAX_WRITE_CHARS:
            return ToolResult(f"error: content longer than {MAX_WRITE_CHARS} characters", False)
        self.ws.write(path, content)
        return ToolResult(f"ok wrote {path} ({len(content.splitlines())} lines)", True)

    def _edit(self, path: str, old: str, new: str) -> ToolResult:
        if self._protected(path):
            return ToolResult(f"error: {path} is protected (tests and test configuration cannot be changed)", False,
                              protected_attempt=True)
        text = self.ws.read(path)
        n = text.count(old) if old else 0
        if n != 1:
            return ToolResult(f"error: `old` occurs {n} times in {path}; it must occur exactly once", False)
        self.ws.write(path, text.replace(old, new, 1))
        return ToolResult(f"ok edited {path}", True)

    def _replace_function(self, path: str, name: str, new: str) -> ToolResult:
        if self._protected(path):
            return ToolResult(f"error: {path} is protected (tests and test configuration cannot be changed)", False,
                              protected_attempt=True)
        if len(new) > MAX_WRITE_CHARS:
            return ToolResult(f"error: new longer than {MAX_WRITE_CHARS} characters", False)
        text = self.ws.read(path)
        span = definition_lines(text, name)
        if isinstance(span, str):
            return ToolResult(f"error: {path}: {span}", False)
        lines = text.splitlines(keepends=True)
        start, end = span
        body = new if new.endswith("\n") or end == len(lines) and not lines[-1].endswith("\n") else new + "\n"
        self.ws.write(path, "".join(lines[:start - 1]) + body + "".join(lines[end:]))
        return ToolResult(f"ok replaced {name} ({path} lines {start}-{end})", True)

    def _run_tests(self, paths: list | None = None) -> ToolResult:
        visible = self.task.visible_tests
        if not visible:
            return ToolResult("error: this task has no visible tests", False)
        targets = [p for p in (paths or visible) if isinstance(p, str)]
        bad = [p for p in targets if not any(p == v or p.startswith(v.split("::", 1)[0] + "::") or
                                             v.startswith(p.rstrip("/") + "/") for v in visible)]
        if bad or not targets:
            return ToolResult(f"error: not a visible test: {', '.join(map(str, bad))[:200]} (visible: "
                              f"{', '.join(visible)[:300]})", False)
        timeout = min(self.task.limits.test_timeout_s, self.cfg.run_timeout_s * 6)
        if self.env is not None and self.env.runner == "swebench":  # the repository's own test command
            run = run_suite(self.ws.root, self.env, path_directives(self.env.repo, sorted({t.split("::", 1)[0]
                            for t in targets})), timeout, self.cfg.tool_output_chars * 4, self.hide_paths)
        else:
            run = run_tests(self.ws.root, targets, timeout, self.cfg.tool_output_chars * 4, self.hide_paths,
                            env=self.env, warm=self.warm)
        passed = sum(run.tests.values())
        head = "ok" if run.status == "ok" else f"error: tests {run.status}"
        summary = f"{head} {passed} passed, {len(run.tests) - passed} failed"
        return ToolResult(summary + "\n" + _tail(steady(run.output, self.ws.root), self.cfg.tool_output_chars),
                          run.status == "ok", ran_tests=True)

    def _run(self, code: str = "", module: str = "", args: list | None = None) -> ToolResult:
        if bool(code) == bool(module):
            return ToolResult("error: give exactly one of `code` or `module`", False)
        argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", module]
        argv += [str(a) for a in (args or [])][:32]
        res = run_isolated(argv, self.ws.root, timeout_s=self.cfg.run_timeout_s,
                           max_output_bytes=self.cfg.tool_output_chars * 4, hide_paths=self.hide_paths)
        status = f"exit {res.returncode}" if res.status == "ok" else res.status
        return ToolResult(f"ok {status}\n" + _tail(steady(res.output, self.ws.root), self.cfg.tool_output_chars),
                          res.status == "ok")

    def _submit(self) -> ToolResult:
        return ToolResult("ok submitted", True, submitted=True)


def definition_lines(text: str, name: str) -> tuple[int, int] | str:
    """The 1-based (first, last) lines of the one top-level function or class `name` of `text` (`Cls.method`: a
    method of a top-level class), from its first decorator; a one-line reason when the text does not parse or
    `name` has no definition or several."""
    try:
        nodes = ast.parse(text).body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return f"cannot parse it ({type(e).__name__}: {str(e)[:80]}); use edit or write_file"
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or not all(p.isidentifier() for p in parts):
        return f"name must be a function or class name, or Class.method; got {name[:60]!r}"
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for i, part in enumerate(parts):
        found = [n for n in nodes if isinstance(n, kinds) and n.name == part]
        if len(found) != 1:
            return f"{len(found)} definitions of {'.'.join(parts[:i + 1])!r}; it must have exactly one"
        if i + 1 < len(parts) and not isinstance(found[0], ast.ClassDef):
            return f"{part!r} is not a class"
        nodes = found[0].body
    node = found[0]
    return min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno


_PYTEST_TIME = re.compile(r"^(.*\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|no tests ran)"
                          r"\b.*?) in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?( =+)?[ \t]*$", re.M)


def steady(output: str, root: str | Path = "") -> str:
    """Command output without what changes from run to run: pytest's wall-clock time (`2 passed in 0.13s` ->
    `2 passed`) and the workspace's absolute path (a fresh temporary directory per episode; paths under it become
    relative). The same workspace content gives the same result tokens, so a seeded episode (and an expert
    transcript) repeats exactly."""
    if root:
        output = output.replace(f"{root}/", "").replace(str(root), ".")
    return _PYTEST_TIME.sub(lambda m: m.group(1) + (m.group(2) or ""), output)


def _tail(text: str, limit: int) -> str:
    """The end of long output (where pytest and tracebacks put what matters), marked when cut."""
    text = text.strip()
    return text if len(text) <= limit else f"[... {len(text) - limit} characters cut]\n" + text[-limit:]
