"""JSON in and out of `codechat serve`, safe against what clients send and what programs print.

    body = loads(raw)            # BadJSON (a one-line reason) for anything the parser cannot take
    raw = dumps(response)        # always bytes: never fails on a string the program made

Out: a program's exception message or stderr may hold a lone surrogate (a buggy string program makes one
easily); strict UTF-8 cannot encode it, and one such verdict must not cost the whole batch. `dumps` writes it
as the visible text `\\udXXX` instead (only when the fast path fails: ordinary responses cost nothing extra).
In: nesting deeper than the parser's stack, integers of more digits than Python converts, invalid UTF-8 and
non-finite numbers (`NaN`, `Infinity`, `1e400`) are refused with the reason; what a field must hold is checked
by the routes.
"""
from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 100
"""Deepest nesting of a request's task records (`too_deep`): they need a few levels. The parser itself refuses
nesting past the interpreter's recursion limit (100,000 levels would exhaust its stack) with RecursionError."""


MAX_DIGITS = 4300
"""Longest integer literal (Python's own int-from-text limit)."""


class BadJSON(ValueError):
    """A request body that is not JSON codechat serve accepts (answered 400 with this reason)."""


def _no_constant(name: str):
    raise BadJSON(f"the request body holds {name}, which is not JSON")


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise BadJSON(f"the number {text[:40]} is out of range")
    return v


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether containers nest more than `limit` levels in `obj` (an iterative walk over containers only)."""
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if d > limit:
            return True
        if isinstance(o, dict):
            o = o.values()
        elif not isinstance(o, list):
            continue
        stack.extend((v, d + 1) for v in o if isinstance(v, (list, dict)))
    return False


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise BadJSON(f"the request body holds an integer of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def loads(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadJSON(f"the request body is not UTF-8 (byte {e.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_float, parse_int=_int)
    except BadJSON:
        raise
    except json.JSONDecodeError as e:
        raise BadJSON(f"the request body is not JSON: {e}") from None
    except RecursionError:
        raise BadJSON("the request body nests deeper than the JSON parser allows") from None


def visible(s: str) -> str:
    """`s` with each lone surrogate written as the text `\\udXXX` (valid UTF-8, nothing else changed)."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _visible(obj: Any) -> Any:
    if isinstance(obj, str):
        return visible(obj)
    if isinstance(obj, dict):
        return {visible(str(k)): _visible(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_visible(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON of a response; lone surrogates become visible text rather than an error."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(_visible(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
