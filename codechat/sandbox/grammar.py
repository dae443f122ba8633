"""The candidate's messages, checked against the grammar of the protocol (`wire.py`, module docstring).

Every message from the candidate is hostile: these functions accept only what the grammar allows, with its
size limits, and raise `WireError` for anything else (the judge then ends that program as `error`).
"""
from __future__ import annotations

from typing import Any

from codechat.sandbox.wire import MAX_ARGS, MAX_MSG, MAX_NAMES, MAX_OUT, MAX_TYPE, WireError, cut, plain_name

HELLO_KINDS = frozenset({"value", "object", "module"})
"""Kinds a hello entry may have."""


def parse_hello(msg: Any) -> tuple[str, Any]:
    """("loaded", [(name, kind, value)]) with only well-formed entries, or ("load_error", (etype, msg)).
    Raises WireError for anything outside the grammar. Entries with a name the judge must never take (not an
    identifier, a dunder) are dropped, not trusted; a `value` entry that is not plain data is dropped too."""
    if type(msg) is not list or not msg:
        raise WireError("malformed hello")
    if msg[0] == "load_error" and len(msg) == 3 and type(msg[1]) is str and type(msg[2]) is str:
        return "load_error", (cut(msg[1], MAX_TYPE), cut(msg[2], MAX_MSG))
    if msg[0] != "loaded" or len(msg) != 2 or type(msg[1]) is not list or len(msg[1]) > MAX_NAMES:
        raise WireError("malformed hello")
    entries = []
    for item in msg[1]:
        if type(item) is not list or len(item) != 3 or type(item[1]) is not str or item[1] not in HELLO_KINDS:
            raise WireError("malformed hello entry")
        name, kind, val = item
        if not plain_name(name):
            continue
        if kind != "value" and type(val) is not str:
            raise WireError("malformed hello entry")
        entries.append((name, kind, val if kind == "value" else cut(val, MAX_TYPE)))
    return "loaded", entries


def _argi(x: Any, nargs: int) -> bool:
    return (type(x) is int and 0 <= x < nargs) or (type(x) is str and plain_name(x))


CALLBACK_KINDS = frozenset({"cb", "cbget", "cbset", "cbiter", "cbnext"})
"""Messages by which the program uses the tests' objects it was given (instead of a REPLY)."""


def parse_callback(msg: Any, objects: dict) -> tuple:
    """(kind, object, args, kwargs) of a CALLBACK message: ("call", obj, [PLAIN...], {KWNAME: PLAIN}),
    ("getattr", obj, (NAME,), {}), ("setattr", obj, (NAME, PLAIN), {}), ("iter", obj, (), {}) or ("next", obj,
    (), {}); only ids the judge handed out resolve, NAME is a plain identifier (never a dunder: no
    `__globals__`, `__class__`, `__dict__`)."""
    if type(msg) is not list or len(msg) not in (2, 3, 4) or type(msg[1]) is not int or msg[1] not in objects:
        raise WireError("malformed callback")
    obj, kind = objects[msg[1]], msg[0]
    if kind in ("cbiter", "cbnext") and len(msg) == 2:
        return kind[2:], obj, (), {}
    if kind == "cb" and len(msg) == 4 and type(msg[2]) is list and type(msg[3]) is list \
            and len(msg[2]) + len(msg[3]) <= MAX_ARGS:
        kwargs = {}
        for item in msg[3]:
            if type(item) is not list or len(item) != 2 or not plain_name(item[0]):
                raise WireError("malformed callback")
            kwargs[item[0]] = item[1]
        return "call", obj, msg[2], kwargs
    if kind == "cbget" and len(msg) == 3 and plain_name(msg[2]):
        return "getattr", obj, (msg[2],), {}
    if kind == "cbset" and len(msg) == 4 and plain_name(msg[2]):
        return "setattr", obj, (msg[2], msg[3]), {}
    raise WireError("malformed callback")


MAX_CONSUMED = 8 << 20
"""Characters of the test's stdin a `callio` reply may say the program read."""


def parse_reply(msg: Any, nargs: int) -> tuple:
    """One reply to a request with `nargs` positional arguments, checked: ("ok", value, wb, out, consumed),
    ("same", argi, wb, out, consumed), ("stop",) or ("exc", etype, message). Raises WireError outside the
    grammar."""
    if type(msg) is not list or not msg:
        raise WireError("malformed reply")
    kind, n = msg[0], len(msg)
    if kind == "ok" and n == 2:
        return "ok", msg[1], (), "", 0
    if kind in ("ok", "same") and n in (4, 5) and type(msg[2]) is list and len(msg[2]) <= MAX_ARGS \
            and type(msg[3]) is str:
        consumed = msg[4] if n == 5 else 0
        if type(consumed) is not int or not 0 <= consumed <= MAX_CONSUMED:
            raise WireError("malformed reply")
        wb = []
        for item in msg[2]:
            if type(item) is not list or len(item) != 2 or not _argi(item[0], nargs):
                raise WireError("malformed write-back")
            wb.append((item[0], item[1]))
        if kind == "same" and not (type(msg[1]) is int and 0 <= msg[1] < nargs):
            raise WireError("malformed reply")
        return kind, msg[1], tuple(wb), cut(msg[3], MAX_OUT), consumed
    if kind in ("stop", "time") and n == 1:
        return (kind,)
    if kind == "exc" and n == 3 and type(msg[1]) is str and type(msg[2]) is str:
        return "exc", cut(msg[1], MAX_TYPE), cut(msg[2], MAX_MSG)
    raise WireError("malformed reply")
