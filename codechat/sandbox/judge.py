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
Names: see `build_namespace` (only names the tests mention, never dunders/builtins/modules; the task's own
prelude and setup run here and win over the program's names).

Limits: objects that are not plain data stay in the candidate; here they are opaque proxies compared by
identity, so a test comparing two program-made objects with the class's own `__eq__` fails (documented in
docs/verifier.md; MBPP has none). Arguments the judge cannot pickle (lambdas defined in tests) are refused.
"""
from __future__ import annotations

import ast
import builtins
import collections
import functools
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
_EXC_CACHE_MAX = 256
"""Exception classes kept: the names come from the program, so the cache must not grow with what it sends."""


def candidate_exception(name: str, msg: str) -> Exception:
    """An exception standing for one the program raised: a subclass of the builtin of that name when there is
    one (so `except ValueError` in a test catches it), always a `CandidateRaised`."""
    name, msg = wire.cut(name, wire.MAX_TYPE) or "Exception", wire.cut(msg, wire.MAX_MSG)
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
        if len(_EXC_CACHE) < _EXC_CACHE_MAX:
            _EXC_CACHE[name] = cls
    return cls(msg)


class _Pickler(pickle.Pickler):
    chan: "Channel"

    def persistent_id(self, obj):  # proxies travel as references to the candidate's own objects
        if type(obj) is Remote:
            return obj._ref
        if type(obj) in _CALLBACKS:  # a test's function: the program gets a proxy that calls back here
            self.chan.judge_objects[id(obj)] = obj
            return ("j", id(obj))
        return None


_CALLBACKS = (types.FunctionType, types.MethodType, types.LambdaType, functools.partial)


class Channel:
    def __init__(self, fd: int, max_bytes: int):
        self.fd, self.max_bytes, self.calls = fd, max_bytes, 0
        self.reader = wire.Reader(fd)
        self.judge_objects: dict[int, object] = {}  # the test's callbacks the program holds proxies of

    def _send(self, msg: tuple) -> None:
        try:
            try:
                if any(type(a) in _CALLBACKS for a in (*msg[2], *msg[3].values())):
                    raise _IsRemote
                # fast path, all in C: no proxy among the arguments (a proxy refuses plain pickling)
                data = b"p" + pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
            except _IsRemote:
                buf = io.BytesIO()
                buf.write(b"r")
                pickler = _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
                pickler.chan = self
                pickler.dump(msg)
                data = buf.getvalue()
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise TypeError(f"argument cannot be sent to the sandboxed program: {e}") from None
        try:
            wire.send(self.fd, data)
        except OSError as e:
            raise CandidateGone(str(e)) from None

    def _callback(self, msg: list) -> None:
        """The program called a test's function it was given: run it here, send back the result (or error)."""
        try:
            fn, args, kwargs = wire.parse_callback(msg, self.judge_objects)
        except wire.WireError as e:
            raise CandidateGone(str(e)) from None
        try:
            reply = ("cbret", None, (fn(*args, **kwargs),), {})
        except CandidateGone:
            raise
        except Exception as e:  # noqa: BLE001 - the test's function raised: so does the program's call
            reply = ("cbexc", None, (type(e).__name__, str(e)[:wire.MAX_MSG]), {})
        self._send(reply)

    def _decode_handle(self, hid: int, type_name: str) -> "Remote":
        return Remote(self, ("h", hid), type_name)

    def recv(self) -> list:
        try:
            msg = wire.loads(self.reader.recv(self.max_bytes), handle=self._decode_handle)
        except (wire.WireError, OSError) as e:
            raise CandidateGone(str(e)[:300]) from None
        if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
            raise CandidateGone("malformed reply")
        return msg

    def request(self, op: str, ref: tuple, *args, **kwargs):
        self.calls += 1
        if op == "call" and sys.stdout is not _STDOUT:  # the test captures prints: have the program's returned
            op = "callout"
        self._send((op, ref, args, kwargs))
        while True:
            msg = self.recv()
            if msg[0] != "cb":
                break
            self._callback(msg)
        try:
            reply = wire.parse_reply(msg, len(args))
        except wire.WireError as e:
            raise CandidateGone(str(e)) from None
        kind = reply[0]
        if kind == "stop":
            raise StopIteration
        if kind == "exc":
            raise candidate_exception(reply[1], reply[2])
        _, value, wb, out = reply
        for key, new in wb:  # the program changed a mutable argument: so does the test's object
            write_back(args[key] if type(key) is int else kwargs.get(key), new)
        if out:
            sys.stdout.write(out)
        return args[value] if kind == "same" else value


_STDOUT = sys.stdout
_MUTABLE = (list, dict, set, bytearray, collections.deque)


def write_back(old, new) -> None:
    """Make the judge's argument `old` equal the program's `new` in place (nested lists/dicts element-wise,
    so rows of a matrix keep their identity). Only builtin containers of the same type are changed."""
    if type(old) is not type(new) or type(old) not in _MUTABLE or old == new:
        return
    if type(old) is list and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if type(a) is type(b) and type(a) in _MUTABLE:
                write_back(a, b)
            elif not (a is b or (type(a) is type(b) and a == b)):
                old[i] = b
    elif type(old) is dict:
        for k in [k for k in old if k not in new]:
            del old[k]
        for k, b in new.items():
            a = old.get(k, _MISSING)
            if type(a) is type(b) and type(a) in _MUTABLE:
                write_back(a, b)
            else:
                old[k] = b
    elif type(old) is set:
        old.clear()
        old.update(new)
    elif type(old) is collections.deque:
        old.clear()
        old.extend(new)
    else:
        old[:] = new


_MISSING = object()


class _IsRemote(Exception):
    """Raised when a proxy is pickled without the proxy-aware pickler (`Channel.request` then uses it)."""


class Remote:
    """A judge-side proxy for an object living in the candidate. Equality and hashing are by identity."""
    __slots__ = ("_chan", "_ref", "_type")

    def __reduce_ex__(self, protocol):
        raise _IsRemote

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

    def __next__(self):  # next() on a generator the program returned
        return self._chan.request("next", self._ref)

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
    """Counts executed checks: every assert; entering a handler of a named exception type (`except ValueError`
    after a call that must raise); leaving a `with ...raises(...)` block normally (pytest.raises)."""

    @staticmethod
    def _hit(node: ast.AST) -> ast.Expr:
        return ast.copy_location(ast.Expr(ast.Call(ast.Name("__codechat_assert_hit__", ast.Load()), [], [])), node)

    def visit_Assert(self, node: ast.Assert):
        return [self._hit(node), node]

    def visit_ExceptHandler(self, node: ast.ExceptHandler):
        self.generic_visit(node)
        broad = node.type is None or (isinstance(node.type, ast.Name) and node.type.id in _BROAD)
        if not broad:
            node.body.insert(0, self._hit(node))
        return node

    def visit_With(self, node: ast.With):
        self.generic_visit(node)
        raises = any(isinstance(i.context_expr, ast.Call) and _called_name(i.context_expr.func) == "raises"
                     for i in node.items)
        return [node, self._hit(node)] if raises else node


_BROAD = {"Exception", "BaseException"}


def _called_name(f: ast.AST) -> str | None:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


_COMPILED: dict[tuple[str, str], types.CodeType] = {}
_NAMES: dict[str, tuple[frozenset, frozenset]] = {}
_CACHE_MAX = 20000
"""Compiled tests and their name sets kept per judge (keyed by the task's own text, not the program's)."""


def instrument(src: str, name: str) -> types.CodeType:
    """Compile a test with every check counted; cached, since RL verifies the same task many times."""
    key = (src, name)
    code = _COMPILED.get(key)
    if code is None:
        tree = _CountAsserts().visit(ast.parse(src))
        code = compile(ast.fix_missing_locations(tree), name, "exec", dont_inherit=True, optimize=0)
        if len(_COMPILED) > _CACHE_MAX:
            _COMPILED.clear()
        _COMPILED[key] = code
    return code


def names_in(src: str) -> tuple[frozenset, frozenset]:
    """(every name `src` mentions, the names it uses as `NAME.attr`): what a test can look up (cached)."""
    got = _NAMES.get(src)
    if got is None:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            tree = ast.Module([], [])
        names, bases = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                bases.add(node.value.id)
        got = frozenset(names), frozenset(bases)
        if len(_NAMES) > _CACHE_MAX:
            _NAMES.clear()
        _NAMES[src] = got
    return got


_STDLIB = frozenset(sys.stdlib_module_names)
_MODULES = _STDLIB - {"this", "antigravity", "idlelib", "turtle", "turtledemo",
                                                  "tkinter", "venv", "ensurepip", "pydoc", "webbrowser"}
"""Top-level modules the judge imports itself when a test uses `NAME.attr` and the task does not define NAME."""
_ALIASES = {"np": "numpy", "numpy": "numpy"}
"""Conventional aliases of non-stdlib modules a test may use the same way (`np.allclose`)."""


def build_namespace(chan: Channel, entries: list, entry_point: str | None, wanted: frozenset,
                    modules: frozenset) -> tuple[dict, set]:
    """The judge's globals before the task's own code runs: (namespace, names taken from the program).

    The rule: only names the tests (or setup) mention are looked up; never a dunder, never a builtin's name
    (except the entry point), never a module: a test's `math.x` / `np.x` gets the judge's own import of that
    module, whatever the program says it is, and the program's hello never makes the judge import anything.
    The task's prelude and setup run after this (`modes.run_tests`), so the names they define replace the
    program's: the program can add names the tests use, never replace the task's."""
    mod = types.ModuleType("__sandbox__")
    sys.modules["__sandbox__"] = mod  # so pickled instances of setup-defined classes resolve on both sides
    ns = mod.__dict__
    ns["__builtins__"] = builtins
    taken = set()
    for name, kind, val in entries:
        if name not in wanted or kind == "module" or hasattr(builtins, name) or name in _ALIASES \
                or (name in modules and name in _STDLIB):  # a fake `math` the tests use as the module
            continue
        if kind == "value":
            try:
                ns[name] = wire.from_plain(val, chan._decode_handle)
            except wire.WireError:
                continue
        else:
            ns[name] = Remote(chan, ("n", name), val)
        taken.add(name)
    for name in modules - ns.keys():
        target = _ALIASES.get(name, name if name in _MODULES else None)
        if target is not None and not hasattr(builtins, name) and name != entry_point:
            try:
                ns[name] = importlib.import_module(target)
            except Exception:  # noqa: BLE001 - not installed here: the test sees a NameError, as in a plain run
                pass
    bind_entry_point(chan, ns, entry_point)
    if entry_point in ns:
        taken.add(entry_point)
    return ns, taken


def bind_entry_point(chan: Channel, ns: dict, entry_point: str | None) -> None:
    """The function under test is always the program's, even when named like a builtin (MBPP 126: `sum`)."""
    if entry_point and wire.plain_name(entry_point):
        ns[entry_point] = Remote(chan, ("n", entry_point), "function")


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
