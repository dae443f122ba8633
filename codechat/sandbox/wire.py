"""Plain-data wire format between sandbox processes: a tagged JSON encoding of Python values (framing: frames.py).

Values produced by untrusted code travel as *plain data*: JSON where every JSON object is a type tag, decoded
back into builtin values only (int, float, str, bytes, bool, None, list, tuple, dict, set, frozenset, complex,
and a few stdlib containers). Decoding never runs code and never builds a user-defined object, so a value's
`__eq__` is always the builtin one: an "always equal" object cannot survive the trip. Objects that are not
plain data (class instances, functions, generators) travel as a *handle*: an id that only means something in
the process that owns the object.

Messages travel framed (`frames.py`); `WireError` is raised by both.

## The protocol (every message from the candidate is hostile: grammar.py's `parse_hello` / `parse_reply` check it)
Parent -> judge (payload pipe, pickle, trusted): the job {mode, prelude, setup, entry_point, tests, inputs, ...}.
Parent -> candidate (payload pipe, marshal, trusted): {code, setup}.
Judge -> candidate (socket, pickle, trusted direction): (op, ref, args, kwargs) with
    op   in OPS = call | callout | getattr | setattr | getitem | len | bool | iter | next | limit | value  (|
         cbret | cbexc: the answer to a CALLBACK, ref None, args (value,) or (etype, message); limit: args
         (budget_s, cpu), a test's time budget, no reply; value: the object REF names now, no args)
    ref  ("n", NAME) a name of the program's module, or ("h", ID) a handle the candidate gave earlier;
    `callout` is `call` with the program's prints captured and returned (the test redirected stdout);
    `callio` is `call` whose first argument is [STDIN TEXT | None, INPUT | None, PRINT | None, CAPTURE, BYTES]:
    the test replaced sys.stdin or patched input/print, and the call runs with them (input/print as the test's
    callables, by callback; with BYTES the stdin also has `.buffer`, as the test's had); its reply carries a
    fifth element, the characters of STDIN the program read.
Candidate -> judge (socket, tagged JSON of plain data, at most `max_result_mb` per frame), one of:
    HELLO  = ["loaded", [ENTRY, ...]]          ENTRY = [NAME, "value", PLAIN] | [NAME, "object", TYPE]
                                                      | [NAME, "module", MODNAME]      (at most MAX_NAMES)
           | ["load_error", ETYPE, MSG]
    REPLY  = ["ok", PLAIN] | ["ok", PLAIN, WB, OUT] | ["same", ARGI, WB, OUT] | ["stop"] | ["exc", ETYPE, MSG]
           | ["time"]                           the program's timer ended the call: the test's budget is spent
    WB     = [[ARGI | KWNAME, PLAIN], ...]      the program's mutable arguments after the call (at most MAX_ARGS)
    NAME   a plain identifier of at most MAX_NAME chars, never a dunder; TYPE/MODNAME/ETYPE: str, cut to
           MAX_TYPE chars; MSG, OUT: str, cut to MAX_MSG / MAX_OUT; ARGI an int index of a call argument.
    `same` says the result *is* argument ARGI (identity survives the trip); PLAIN is `from_plain` data.
    CALLBACK = ["cb", JID, [PLAIN, ...], [[KWNAME, PLAIN], ...]] | ["cbget", JID, NAME]
             | ["cbset", JID, NAME, PLAIN] | ["cbiter", JID] | ["cbnext", JID]
                                               (instead of a REPLY, any number of times)
           the program calls, reads or sets an attribute of, or iterates (a test's generator) one of the tests'
           objects it was given as JID (an id the judge handed out in this job); the judge does it and answers
           (op "cbret" with the result, or "cbexc" with its error: StopIteration ends an iteration).
    PLAIN also holds {"$o": TYPE, "h": ID, "f": [[NAME, PLAIN], ...]} (an instance's fields, at most
           MAX_FIELDS; the judge rebuilds it as the task's class TYPE or keeps the handle ID), {"$o": TYPE, "t":
           [PLAIN, ...]} (a named tuple) and {"$j": JID} (one of the tests' objects, given back).
Anything else (another kind, a wrong arity or type, bad JSON, an over-long frame) is a `WireError`: the judge
ends that program as `error`. A MODNAME is only a description: the judge never imports what a message names.
Supervisor -> parent (socket, pickle, trusted): the observations {timed_out, output_over, output_head,
c_signal, judge (the judge's record, still encoded), duration_s, blocked}, or {"fatal": MSG}.
Judge -> supervisor: one tagged-JSON record {status, error_type, message, tests_passed, outputs?, errors?}.
"""
from __future__ import annotations

import collections
import json
import math
from typing import Any, Callable

from codechat.sandbox.frames import WireError

MAX_DEPTH = 200
"""Nesting depth an encoded value may have: deeper containers and objects go as handles when the encoder has
a handle function (the candidate's replies: a 40,000-deep linked list arrives 200 levels at a time), else the
value is not plain data."""
MAX_NAMES = 20000
"""Names a program's hello may list."""
MAX_NAME = 100
"""Characters of a name in the hello."""
MAX_TYPE = 200
"""Characters kept of a type, module or exception-type name from the program."""
MAX_MSG = 2048
"""Characters kept of an exception message from the program."""
MAX_OUT = 1 << 16
"""Characters of captured prints returned with one `callout` reply."""
MAX_ARGS = 64
"""Written-back arguments one reply may carry."""
MAX_FIELDS = 1000
"""Fields an encoded object may carry (more: not plain data)."""
OPS = frozenset({"call", "callout", "callio", "getattr", "setattr", "getitem", "len", "bool", "iter", "next", "limit",
                 "value"})
"""Requests the judge sends (trusted direction; the candidate refuses any other)."""
_BIG_INT_BITS = 12000
"""Ints wider than this travel as hex (decimal str<->int conversion is capped at 4300 digits)."""


# --- values -> plain data ----------------------------------------------------------------------------------------
def to_plain(x: Any, handle: Callable[[Any, int], Any] | None = None, depth: int = 0) -> Any:
    """Encode `x` as JSON-able tagged data. Non-plain objects (and tuple subclasses with `_fields`) are encoded
    by `handle(x, depth)`: a handle (`handle_tag`) or an object's fields (candidate.py); without one, raise."""
    if depth > MAX_DEPTH and not (x is None or type(x) in (bool, int, float, str)):
        if handle is None:
            raise WireError("value nested too deeply")
        return handle(x, depth)  # the rest stays where it is, read on demand
    d = depth + 1
    if x is None or isinstance(x, (bool, str)):
        # bool/str subclasses are reduced to the builtin value: only fidelity is at stake, never safety
        return x if type(x) in (bool, str, type(None)) else (bool(x) if isinstance(x, bool) else str.__str__(x))
    if isinstance(x, int):
        v = int.__index__(x) if type(x) is not int else x
        return v if v.bit_length() <= _BIG_INT_BITS else {"$i": format(v, "x")}
    if isinstance(x, float):
        v = float.__float__(x)
        return v if math.isfinite(v) else {"$f": repr(v)}
    if isinstance(x, complex):
        return {"$c": [to_plain(x.real), to_plain(x.imag)]}
    if isinstance(x, (bytes, bytearray)):
        return {"$b": bytes(x).hex(), "ba": isinstance(x, bytearray)}
    if isinstance(x, collections.OrderedDict):
        return {"$od": [[to_plain(k, handle, d), to_plain(v, handle, d)] for k, v in dict.items(x)]}
    if isinstance(x, collections.Counter):
        return {"$ctr": [[to_plain(k, handle, d), to_plain(v, handle, d)] for k, v in dict.items(x)]}
    if isinstance(x, dict):
        return {"$d": [[to_plain(k, handle, d), to_plain(v, handle, d)] for k, v in dict.items(x)]}
    if isinstance(x, list):
        return [to_plain(v, handle, d) for v in list.__iter__(x)]
    if isinstance(x, tuple):  # namedtuples compare as tuples (and are rebuilt when the judge has the class)
        if type(x) is not tuple and handle is not None and hasattr(type(x), "_fields"):
            return handle(x, d)
        return {"$t": [to_plain(v, handle, d) for v in tuple.__iter__(x)]}
    if isinstance(x, frozenset):
        return {"$fs": [to_plain(v, handle, d) for v in frozenset.__iter__(x)]}
    if isinstance(x, set):
        return {"$s": [to_plain(v, handle, d) for v in set.__iter__(x)]}
    if isinstance(x, collections.deque):
        return {"$dq": [to_plain(v, handle, d) for v in x]}
    if isinstance(x, range):
        return {"$r": [x.start, x.stop, x.step]}
    mod = type(x).__module__
    if mod == "decimal" and type(x).__name__ == "Decimal":  # by name: importing decimal costs every fork
        return {"$dec": str(x)}
    if mod == "fractions" and type(x).__name__ == "Fraction":
        return {"$fr": [int(x.numerator), int(x.denominator)]}
    if mod == "datetime" and type(x).__name__ in _DATETIME:  # exact types only: a subclass is the program's
        if type(x).__name__ == "timedelta":
            return {"$dt": "timedelta", "v": [x.days, x.seconds, x.microseconds]}
        if getattr(x, "tzinfo", None) is not None and type(x.tzinfo).__name__ != "timezone":
            return handle(x, d) if handle is not None else _raise_not_plain(x)  # a zone rule: not data
        return {"$dt": type(x).__name__, "v": x.isoformat()}
    view = _VIEWS.get(type(x))
    if view is not None:  # dict views keep their order and set semantics: rebuilt over a fresh dict
        items = list(x)
        if view == "items":
            return {"$dv": view, "v": [[to_plain(k, handle, d), to_plain(v, handle, d)] for k, v in items]}
        return {"$dv": view, "v": [to_plain(v, handle, d) for v in items]}
    np_value = _numpy_to_plain(x, handle, d)
    if np_value is not None:
        return np_value
    if handle is None:
        raise WireError(f"not plain data: {type(x).__name__}")
    return handle(x, d)


_DATETIME = ("date", "datetime", "time", "timedelta")
_VIEWS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items"}


def _raise_not_plain(x: Any):
    raise WireError(f"not plain data: {type(x).__name__}")


def handle_tag(hid: int, x: Any) -> dict:
    """The encoding of an object that stays where it is: its handle and its type's name."""
    return {"$h": hid, "type": type(x).__name__}


def _numpy_to_plain(x: Any, handle, depth: int) -> Any:
    mod = type(x).__module__
    if not mod.startswith("numpy"):
        return None
    import numpy as np  # only loaded when the value already is a numpy object
    if isinstance(x, np.generic):
        return to_plain(x.item(), handle, depth)
    if isinstance(x, np.ndarray):
        return {"$nd": to_plain(x.tolist(), handle, depth), "dtype": str(x.dtype)}
    return None


# --- plain data -> values ----------------------------------------------------------------------------------------
class Decoder:
    """What decoding makes of the tags that are not builtin data. This default: a handle becomes
    `handle(id, type_name)` (an error without one), an object's fields its handle, a named tuple a tuple, a
    judge object an error. The judge's `Channel` rebuilds objects of the task's classes (judge_objects.py)."""

    def __init__(self, handle: Callable[[int, str], Any] | None = None):
        self._handle = handle

    def handle(self, hid: int, type_name: str) -> Any:
        if self._handle is None:
            raise WireError("unexpected handle")
        return self._handle(hid, type_name)

    def instance(self, name: str, hid: int, fields: list[tuple[str, Any]]) -> Any:
        return self.handle(hid, name)

    def named_tuple(self, name: str, values: list) -> Any:
        return tuple(values)

    def judge_object(self, jid: int) -> Any:
        raise WireError("unexpected judge object")


def from_plain(x: Any, handle: "Decoder | Callable[[int, str], Any] | None" = None) -> Any:
    """Decode tagged data into builtin values; {"$h": id} becomes `handle(id, type_name)` (or an error); an
    object's fields, a named tuple and a judge object go to the `Decoder`'s methods of those names."""
    return _from_plain(x, handle if isinstance(handle, Decoder) else Decoder(handle))


def _object_fields(v: Any, handle: "Decoder") -> list[tuple[str, Any]]:
    if type(v) is not list or len(v) > MAX_FIELDS:
        raise WireError("malformed object fields")
    out = []
    for item in v:
        if type(item) is not list or len(item) != 2 or not plain_name(item[0]):
            raise WireError("malformed object field")
        out.append((item[0], _from_plain(item[1], handle)))
    return out


def _from_plain(x: Any, handle: "Decoder") -> Any:
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        return [_from_plain(v, handle) for v in x]
    if not isinstance(x, dict) or len(x) == 0:
        raise WireError(f"malformed plain data: {type(x).__name__}")
    tag = next(iter(x))
    v = x[tag]
    dec = lambda items: [_from_plain(i, handle) for i in items]  # noqa: E731
    try:
        if tag == "$t":
            return tuple(dec(v))
        if tag == "$s":
            return set(dec(v))
        if tag == "$fs":
            return frozenset(dec(v))
        if tag in ("$d", "$od", "$ctr"):
            pairs = [(_from_plain(k, handle), _from_plain(val, handle)) for k, val in v]
            cls = {"$d": dict, "$od": collections.OrderedDict, "$ctr": collections.Counter}[tag]
            return cls(pairs) if tag != "$ctr" else collections.Counter(dict(pairs))
        if tag == "$i" and isinstance(v, str) and len(v) <= 1 << 22:
            return int(v, 16)
        if tag == "$f":
            return float({"nan": "nan", "inf": "inf", "-inf": "-inf"}[v])
        if tag == "$c":
            return complex(from_plain(v[0]), from_plain(v[1]))
        if tag == "$b":
            raw = bytes.fromhex(v)
            return bytearray(raw) if x.get("ba") else raw
        if tag == "$dq":
            return collections.deque(dec(v))
        if tag == "$r":
            return range(int(v[0]), int(v[1]), int(v[2]))
        if tag == "$dec":
            import decimal  # only loaded when a value of it arrives (every module the zygote holds slows each fork)
            return decimal.Decimal(str(v))
        if tag == "$fr":
            import fractions  # only loaded when a value of it arrives
            return fractions.Fraction(int(v[0]), int(v[1]))
        if tag == "$dt" and type(v) is str and x.get("v") is not None:
            import datetime  # only loaded when a value of it arrives
            cls = {"date": datetime.date, "datetime": datetime.datetime, "time": datetime.time,
                   "timedelta": datetime.timedelta}[v]
            if v == "timedelta":
                days, secs, us = (int(i) for i in x["v"])
                return datetime.timedelta(days, secs, us)
            text = x["v"]
            if type(text) is not str or len(text) > 64:
                raise WireError("malformed date")
            return cls.fromisoformat(text)
        if tag == "$dv" and type(x.get("v")) is list:
            items = x["v"]
            if v == "keys":
                return dict.fromkeys(dec(items)).keys()
            if v == "values":
                return dict(enumerate(dec(items))).values()
            if v == "items":
                return dict((_from_plain(k, handle), _from_plain(val, handle)) for k, val in items).items()
            raise WireError("malformed dict view")
        if tag == "$nd":
            return _ndarray(dec(v) if isinstance(v, list) else _from_plain(v, handle), str(x.get("dtype")))
        if tag == "$h":
            return handle.handle(int(v), str(x.get("type", "object")))
        if tag == "$o" and type(v) is str:  # an instance of a class: its name, handle and fields (or values)
            name = cut(v, MAX_TYPE)
            if "t" in x:
                if type(x["t"]) is not list:
                    raise WireError("malformed named tuple")
                return handle.named_tuple(name, dec(x["t"]))
            return handle.instance(name, int(x["h"]), _object_fields(x.get("f"), handle))
        if tag == "$j":  # one of the judge's own objects, handed to the program earlier
            return handle.judge_object(int(v))
    except WireError:
        raise
    except Exception as e:  # unhashable set member, bad base64, ...: the sender broke the format
        raise WireError(f"malformed plain data under {tag}: {type(e).__name__}") from None
    raise WireError(f"unknown tag {tag!r}")


def _ndarray(data: Any, dtype: str) -> Any:
    try:
        import numpy as np  # only loaded when the value already is a numpy object
    except ImportError:
        return data
    return np.array(data, dtype=dtype if dtype in np.sctypeDict else None)


def _no_default(o: Any) -> Any:
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


# One C encoder, built once (json.dumps with separators builds a JSONEncoder and a C encoder on every call).
# No circular-reference markers: to_plain's output is a fresh tree, and its depth is capped.
_encode = json.encoder.c_make_encoder(None, _no_default, json.encoder.encode_basestring_ascii, None, ":", ",",
                                      False, False, True) if json.encoder.c_make_encoder else None


def dumps(x: Any, handle=None) -> bytes:
    plain = to_plain(x, handle)
    if _encode is None:
        return json.dumps(plain, separators=(",", ":")).encode()
    return "".join(_encode(plain, 0)).encode()


_decode = json.JSONDecoder().decode


def loads(b: bytes, handle: "Decoder | Callable[[int, str], Any] | None" = None) -> Any:
    try:
        return from_plain(_decode(b.decode()), handle)
    except (ValueError, RecursionError) as e:
        raise WireError(f"malformed message: {type(e).__name__}") from None


# --- names and strings from the program (the grammar itself: grammar.py) --------------------------------------
def plain_name(x: Any) -> bool:
    """A name the judge may look up for the tests: a str identifier, short, not a dunder."""
    return (type(x) is str and 0 < len(x) <= MAX_NAME and x.isidentifier()
            and not (x.startswith("__") and x.endswith("__")))


def cut(x: Any, n: int) -> str:
    """`x` as a builtin str of at most `n` characters ('' for a non-str)."""
    return str.__str__(x)[:n] if isinstance(x, str) else ""
