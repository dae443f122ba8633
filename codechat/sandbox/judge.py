"""The judge side: runs the tests in a process the candidate never touches, calling into the candidate by RPC.

The judge holds the test source and the expected values; the candidate holds the program. Names the program
defines appear in the judge as `Remote` proxies: calling one sends the arguments (pickled, judge -> candidate,
the trusted direction) and receives the result as plain data (`wire`), decoded into builtin values only.
So every comparison in a test runs here, on builtin types, with the builtin `__eq__`:
- always-equal objects, patched builtins/AssertionError, excepthook/atexit/signal/thread tricks and fake
  printed output change nothing here (they live in the other process);
- early exits (sys.exit, os._exit, self-kill) just close the channel: the test errors, never passes;
- the tests are never sent to the candidate, so inspect/frames/gc there cannot read or patch them;
- every assert statement of the tests is instrumented: a test passes only if it executed at least one
  assertion and called into the program at least once.
Names the program defines that shadow builtins, or that name a standard-library module, are not taken from it.

Limits: objects that are not plain data stay in the candidate; here they are opaque proxies compared by
identity, so a test comparing two program-made objects with the class's own `__eq__` fails (documented in
docs/verifier.md; MBPP has none). Arguments the judge cannot pickle (lambdas defined in tests) are refused.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import io
import os
import pickle
import sys
import types

from codechat.sandbox import wire


class CandidateRaised(Exception):
    """Base of exceptions re-raised here because the candidate's code raised them."""


class CandidateGone(Exception):
    """The candidate closed the channel or died mid-test (early exit, crash, kill)."""


_EXC_CACHE: dict[str, type] = {}


def candidate_exception(name: str, msg: str) -> Exception:
    cls = _EXC_CACHE.get(name)
    if cls is None:
        base = getattr(builtins, name, None)
        try:
            if isinstance(base, type) and issubclass(base, Exception):
                cls = type(name, (base, CandidateRaised), {})
            else:
                cls = type(name, (CandidateRaised,), {})
        except TypeError:  # incompatible layouts
            cls = type(name, (CandidateRaised,), {})
        _EXC_CACHE[name] = cls
    return cls(msg)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):  # proxies travel as references to the candidate's own objects
        return obj._ref if type(obj) is Remote else None


class Channel:
    def __init__(self, fd: int, max_bytes: int):
        self.fd, self.max_bytes, self.calls = fd, max_bytes, 0

    def _decode_handle(self, hid: int, type_name: str) -> "Remote":
        return Remote(self, ("h", hid), type_name)

    def recv(self) -> list:
        try:
            msg = wire.loads(wire.recv(self.fd, self.max_bytes), handle=self._decode_handle)
        except (wire.WireError, OSError) as e:
            raise CandidateGone(str(e)) from None
        if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
            raise CandidateGone("malformed reply")
        return msg

    def request(self, op: str, ref: tuple, *args, **kwargs):
        self.calls += 1
        buf = io.BytesIO()
        pickler = _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            pickler.dump((op, ref, args, kwargs))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise TypeError(f"argument cannot be sent to the sandboxed program: {e}") from None
        try:
            wire.send(self.fd, buf.getvalue())
        except OSError as e:
            raise CandidateGone(str(e)) from None
        reply = self.recv()
        if reply[0] == "ok" and len(reply) == 2:
            return reply[1]
        if reply[0] == "stop":
            raise StopIteration
        if reply[0] == "exc" and len(reply) == 3:
            raise candidate_exception(str(reply[1]), str(reply[2]))
        raise CandidateGone("malformed reply")


class Remote:
    """A judge-side proxy for an object living in the candidate. Equality and hashing are by identity."""
    __slots__ = ("_chan", "_ref", "_type")

    def __init__(self, chan: Channel, ref: tuple, type_name: str):
        object.__setattr__(self, "_chan", chan)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_type", type_name)

    def __call__(self, *args, **kwargs):
        return self._chan.request("call", self._ref, *args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._chan.request("getattr", self._ref, name)

    def __setattr__(self, name: str, value) -> None:
        self._chan.request("setattr", self._ref, name, value)

    def __getitem__(self, key):
        return self._chan.request("getitem", self._ref, key)

    def __len__(self) -> int:
        n = self._chan.request("len", self._ref)
        if type(n) is not int:
            raise TypeError("len() of a sandboxed object did not return an int")
        return n

    def __bool__(self) -> bool:
        # truth of a program-made object (e.g. a re.Match) is the program's to decide, as in a plain run
        b = self._chan.request("bool", self._ref)
        if type(b) is not bool:
            raise TypeError("bool() of a sandboxed object did not return a bool")
        return b

    def __iter__(self):
        it = self._chan.request("iter", self._ref)
        if type(it) is not Remote:
            raise TypeError("the program's iterator is not an object")
        return _RemoteIterator(it)

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<sandboxed {self._type} object>"


class _RemoteIterator:
    def __init__(self, it: Remote):
        self.it = it

    def __iter__(self):
        return self

    def __next__(self):
        return self.it._chan.request("next", self.it._ref)


class _CountAsserts(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert):
        hit = ast.Expr(ast.Call(ast.Name("__codechat_assert_hit__", ast.Load()), [], []))
        return [ast.copy_location(hit, node), node]


_COMPILED: dict[tuple[str, str], types.CodeType] = {}


def instrument(src: str, name: str) -> types.CodeType:
    """Compile a test with every assert counted; cached, since RL verifies the same task many times."""
    key = (src, name)
    code = _COMPILED.get(key)
    if code is None:
        tree = _CountAsserts().visit(ast.parse(src))
        code = compile(ast.fix_missing_locations(tree), name, "exec", dont_inherit=True, optimize=0)
        if len(_COMPILED) > 20000:
            _COMPILED.clear()
        _COMPILED[key] = code
    return code


_STDLIB = frozenset(sys.stdlib_module_names) | {"numpy"}


def build_namespace(chan: Channel, names: list, entry_point: str | None) -> dict:
    """The judge's globals: the program's names as proxies/plain values, minus builtins and stdlib modules."""
    mod = types.ModuleType("__sandbox__")
    sys.modules["__sandbox__"] = mod  # so pickled instances of setup-defined classes resolve on both sides
    ns = mod.__dict__
    ns["__builtins__"] = builtins
    stdlib = _STDLIB
    for item in names:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            continue
        name, kind, val = item
        if not name.isidentifier() or hasattr(builtins, name):
            continue
        if kind == "module" and isinstance(val, str) and val.split(".")[0] in stdlib:
            try:
                ns[name] = importlib.import_module(val)
            except Exception:  # noqa: BLE001
                pass
        elif name.split(".")[0] in stdlib:
            continue  # a fake `math`/`np` object from the program must not stand in for the real module
        elif kind == "value":
            try:
                ns[name] = wire.from_plain(val, chan._decode_handle)
            except wire.WireError:
                pass
        else:
            ns[name] = Remote(chan, ("n", name), str(kind))
    if entry_point and entry_point.isidentifier() and entry_point not in ns:
        # the function under test is always the program's, even when named like a builtin (MBPP 126: `sum`)
        ns[entry_point] = Remote(chan, ("n", entry_point), "function")
    return ns


def classify(e: BaseException) -> tuple[str, str, str]:
    """(status, error_type, message) for an exception raised while running a test."""
    if isinstance(e, CandidateGone):
        return "error", "EarlyExit", f"program ended before the tests finished ({e})"
    if isinstance(e, CandidateRaised):
        name = type(e).__name__
        return ("memory" if name == "MemoryError" else "error"), name, str(e)[:300]
    if isinstance(e, AssertionError):
        return "failed", "AssertionError", str(e)[:300]
    if isinstance(e, MemoryError):
        return "memory", "MemoryError", "judge ran out of memory on the program's values"
    return "error", type(e).__name__, str(e)[:300]
