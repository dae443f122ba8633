"""How a model writes a tool call: registered formats, each a printer and a parser of the same grammar.

    fmt = get_call_format("compact")          # AgentConfig.call_format; "json" is the default
    text = fmt.format("read_file", {"path": "pkg/a.py"})
    fmt.parse("thinking...\\n" + text)        # -> ToolCall("read_file", {"path": "pkg/a.py"})

`json` (the Qwen/Hermes format that `<tool_call>`-aware chat templates emit):

    <tool_call>
    {"name": "edit", "arguments": {"path": "pkg/stats.py", "old": "lo < x", "new": "lo <= x"}}
    </tool_call>

`compact` (for models trained from scratch: no quoting, no escapes; code goes in verbatim, line by line):

    <tool_call>write_file
    @path
    pkg/stats.py
    @content
    def f(x):
        return x
    </tool_call>

Grammar of `compact`: BODY is the text between `<tool_call>` and the next `</tool_call>` (or the end of the
turn), with one trailing newline dropped. Its first line is the tool name; every later line that is exactly
`@P`, P a parameter of that tool, starts argument P, and the lines up to the next such line (or the end) are
its value, joined by newlines. A string is the value as is; an integer is an optional minus and digits; an array
is one element per non-empty line. So a string that contains `</tool_call>` or a line `@P` (P a
parameter of the same tool) cannot be written, and neither can an array element that is empty or holds a
newline: `format` raises ValueError for those, and for a non-string element, since `parse` could not give them
back (nor an integer of 19 digits or more). Every other call parses back to itself (tests/test_call_formats.py
fuzzes both directions).

Both parsers share `check_call` (the names, types and required arguments of `tools.TOOLS`) and never raise:
any text gives a ToolCall, with `error` set when it holds no well-formed call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from codechat import CodechatError
from codechat.rollout.tools import CALL_CLOSE, CALL_OPEN, TOOLS, ToolCall, check_call, format_call, parse_tool_call

_INT = re.compile(r"-?[0-9]{1,18}")
"""An integer argument of the compact format (18 digits at most: no huge-int conversion)."""


@dataclass(frozen=True)
class CallFormat:
    name: str
    format: Callable[[str, dict[str, Any]], str]
    """(tool name, arguments) -> the text of the call, as the model should write it."""
    parse: Callable[[str], ToolCall]
    """A model turn's text -> its first call (never raises; `error` says what is malformed)."""


def _body(text: str) -> str | None:
    start = text.find(CALL_OPEN)
    if start < 0:
        return None
    end = text.find(CALL_CLOSE, start)
    return text[start + len(CALL_OPEN): end if end >= 0 else len(text)]


def compact_format(name: str, arguments: dict[str, Any]) -> str:
    params = TOOLS.get(name, {})
    marks = {f"@{p}" for p in params}
    lines = [f"{CALL_OPEN}{name}"]
    for p, v in arguments.items():
        kind = params[p][0] if p in params else "string"
        if kind == "array":
            if not isinstance(v, list) or not all(isinstance(x, str) and x and "\n" not in x for x in v):
                raise ValueError(f"compact call format: {name}.{p} must be a list of non-empty one-line strings")
            v = "\n".join(v)
        elif kind == "integer" and isinstance(v, int) and not isinstance(v, bool) and abs(v) < 10 ** 18:
            v = str(v)
        if not isinstance(v, str):
            raise ValueError(f"compact call format: {name}.{p} must be a {kind}")
        if CALL_CLOSE in v or any(line in marks for line in v.split("\n")):
            raise ValueError(f"compact call format: {name}.{p} holds {CALL_CLOSE} or a line @PARAMETER")
        lines += [f"@{p}", v]
    return "\n".join(lines) + f"\n{CALL_CLOSE}"


def compact_parse(text: str) -> ToolCall:
    body = _body(text)
    if body is None:
        return ToolCall("", error=f"no tool call: end your turn with {CALL_OPEN}TOOL, then a line @ARGUMENT and "
                                  f"its value per argument, then {CALL_CLOSE}")
    lines = (body[:-1] if body.endswith("\n") else body).split("\n")
    name = lines[0].strip()
    if name not in TOOLS:
        return ToolCall(name[:40], error=f"unknown tool {name[:40]!r} (tools: {', '.join(TOOLS)})")
    marks = {f"@{p}": p for p in TOOLS[name]}
    args: dict[str, list[str]] = {}
    current = None
    for line in lines[1:]:
        if line in marks:
            current = marks[line]
            if current in args:
                return ToolCall(name, error=f"{name}: argument {current!r} given twice")
            args[current] = []
        elif current is None:
            return ToolCall(name, error=f"{name}: text before the first argument line ({', '.join(marks)})"
                            if marks else f"{name}: takes no arguments")
        else:
            args[current].append(line)
    typed: dict[str, Any] = {}
    for p, value in args.items():
        kind = TOOLS[name][p][0]
        if kind == "array":
            typed[p] = [x for x in value if x]  # elements are non-empty: an empty line separates nothing
        elif kind == "integer":
            raw = "\n".join(value).strip()
            if not _INT.fullmatch(raw):
                return ToolCall(name, error=f"{name}: argument {p!r} must be an integer")
            typed[p] = int(raw)
        else:
            typed[p] = "\n".join(value)
    return check_call(name, typed)


CALL_FORMATS: dict[str, CallFormat] = {
    "json": CallFormat("json", lambda name, arguments: format_call(name, **arguments), parse_tool_call),
    "compact": CallFormat("compact", compact_format, compact_parse),
}
"""Tool-call formats by name (`agent.call_format`)."""


def get_call_format(name: str) -> CallFormat:
    if name not in CALL_FORMATS:
        raise CodechatError(f"agent.call_format: unknown format {name!r} (valid: {', '.join(CALL_FORMATS)})")
    return CALL_FORMATS[name]
