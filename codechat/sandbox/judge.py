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

Objects: instances of the task's own classes the program returns are rebuilt here as the task's class from
their fields; the tests' functions, generators, classes and instances handed to the program stay here and the
program uses them by callback (judge_objects.py, with count and nesting limits). Other objects that are not plain
data stay in the candidate; here they are opaque proxies compared by identity, so a test comparing two objects
of a class only the program defines with that class's own `__eq__` fails (docs/verifier.md).
Time limits (timelimits.py): `arm` gives the program a test's budget; a `time` reply ends that test
(`TimeLimit`), no reply by the backstop deadline ends the program (`TimeLimitGone`).
"""
from __future__ import annotations

import builtins
import io
import pickle
import select
import sys
import time

from codechat.sandbox import frames, grammar, judge_objects, wire
from codechat.sandbox.bindings import write_back
from codechat.sandbox.remote import IsRemote, Remote


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
    return raised_class(name)(wire.cut(msg, wire.MAX_MSG))


def raised_class(name: str) -> type:
    """The judge's class for the program's exceptions named `name` (one per name while the cache has room):
    what a test's `except TheirError` names when the program defines `TheirError` (modes.py binds it)."""
    name = wire.cut(name, wire.MAX_TYPE) or "Exception"
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
    return cls


class CallbackLimit(CandidateGone):
    """The program called back into the tests' objects too often, or nested too deeply: it is ended."""


class TimeLimit(BaseException):
    """The program's timer ended its call: the test's time budget is spent (timelimits.py). A BaseException,
    so a test's `except Exception` cannot swallow it; the program is still usable for the next test."""


class TimeLimitGone(CandidateGone):
    """The program did not answer by the test's backstop deadline: that test fails and the program is ended."""


class _Pickler(pickle.Pickler):
    chan: "Channel"

    def persistent_id(self, obj):  # proxies travel as references to the candidate's own objects
        if type(obj) is Remote:
            return obj._ref
        if judge_objects.is_judge_object(obj, self.chan.shared):  # the program gets a reference to ours
            if len(self.chan.judge_objects) >= MAX_JUDGE_OBJECTS and id(obj) not in self.chan.judge_objects:
                raise TypeError(f"more than {MAX_JUDGE_OBJECTS} of the tests' objects handed to the program")
            self.chan.judge_objects[id(obj)] = obj
            return ("j", id(obj))
        return None


MAX_CALLBACKS = 100_000
"""Calls, attribute reads and writes a program may make on the tests' objects in one job (more: `error`)."""
MAX_NESTING = 50
"""Test -> program -> test ... calls nested at once (deeper: `error`)."""
MAX_JUDGE_OBJECTS = 100_000
"""The tests' objects one job may hand to the program."""
_SANDBOX = judge_objects.MODULE.encode()


class Channel(wire.Decoder):
    """The judge's end of the socket to the candidate; decodes its messages (rebuilding objects of the task's
    classes, `judge_objects.py`) and answers its calls back into the tests' objects."""

    def __init__(self, fd: int, max_bytes: int):
        self.fd, self.max_bytes, self.calls = fd, max_bytes, 0
        self.reader = frames.Reader(fd)
        self.judge_objects: dict[int, object] = {}  # the tests' objects the program holds references to
        self.classes: dict | None = None  # the tests' namespace, once the task's code ran (run_tests)
        self.shared: frozenset = frozenset()  # the setup's and prelude's classes: the program has them too
        self.callbacks = self.nesting = 0
        self.deadline = 0.0  # with time limits: when the judge stops waiting for the program (monotonic)

    def arm(self, budget_s: float, cpu: bool, deadline: float) -> None:
        """Give the program this test's time budget (its timer interrupts a call past it); no reply awaited."""
        self._send(("limit", None, (float(budget_s), bool(cpu)), {}))
        self.deadline = deadline

    def _send(self, msg: tuple) -> None:
        try:
            try:
                # fast path, all in C: no proxy (it refuses plain pickling), no lambda (not picklable), nothing
                # of the task's module by name (a test's function or class, an instance of one)
                data = b"p" + pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
                if _SANDBOX in data:
                    raise IsRemote
            except (IsRemote, pickle.PicklingError, TypeError, AttributeError):
                buf = io.BytesIO()
                buf.write(b"r")
                pickler = _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
                pickler.chan = self
                pickler.dump(msg)
                data = buf.getvalue()
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise TypeError(f"argument cannot be sent to the sandboxed program: {e}") from None
        try:
            frames.send(self.fd, data)
        except OSError as e:
            raise CandidateGone(str(e)) from None

    def _callback(self, msg: list) -> None:
        """The program used one of the tests' objects it was given (a call, an attribute read or write, iter()
        or next()): do it here and send back the result, or the error it raised (StopIteration too)."""
        try:
            kind, obj, args, kwargs = grammar.parse_callback(msg, self.judge_objects)
        except wire.WireError as e:
            raise CandidateGone(str(e)) from None
        self.callbacks += 1
        if self.callbacks > MAX_CALLBACKS:
            raise CallbackLimit(f"more than {MAX_CALLBACKS} calls back into the tests' objects")
        try:
            if kind == "call":
                value = obj(*args, **kwargs)
            elif kind == "getattr":
                value = getattr(obj, args[0])
            elif kind == "iter":
                value = iter(obj)
            elif kind == "next":
                value = next(obj)
            elif judge_objects.settable(obj, args[0]):
                value = setattr(obj, args[0], args[1])
            else:
                raise AttributeError(f"attribute '{args[0]}' of a test's object cannot be set")
            try:
                return self._send(("cbret", None, (value,), {}))
            except TypeError as e:  # a result that cannot be sent: the program's call raises instead
                err = e
        except CandidateGone:
            raise
        except Exception as e:  # noqa: BLE001 - the test's function raised: so does the program's call
            err = e
        self._send(("cbexc", None, (type(err).__name__, str(err)[:wire.MAX_MSG]), {}))

    # --- wire.Decoder: what the program's values become here -------------------------------------------------
    def handle(self, hid: int, type_name: str) -> "Remote":
        return Remote(self, ("h", hid), type_name)

    def instance(self, name: str, hid: int, fields: list) -> object:
        obj = judge_objects.rebuild(judge_objects.task_class(self.classes, name), fields)
        if obj is None:
            obj = judge_objects.enum_member(self.classes, name, fields)
        return Remote(self, ("h", hid), name) if obj is None else obj

    def named_tuple(self, name: str, values: list) -> tuple:
        obj = judge_objects.rebuild_tuple(judge_objects.task_class(self.classes, name), values)
        return tuple(values) if obj is None else obj

    def judge_object(self, jid: int) -> object:
        try:
            return self.judge_objects[jid]
        except KeyError:
            raise wire.WireError("unknown judge object") from None

    def proxy(self, ref: tuple, type_name: str) -> "Remote":
        """A proxy for the program's object `ref` (("n", NAME) or ("h", ID))."""
        return Remote(self, ref, type_name)

    def recv(self) -> list:
        if self.deadline and not self.reader.ready():
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeLimitGone("the program did not answer within the test's time limit")
        try:
            msg = wire.loads(self.reader.recv(self.max_bytes), handle=self)
        except (wire.WireError, OSError) as e:
            raise CandidateGone(str(e)[:300]) from None
        if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
            raise CandidateGone("malformed reply")
        return msg

    def request(self, op: str, ref: tuple, *args, **kwargs):
        self.calls += 1
        io_spec, stdin = None, None
        if op == "call":
            io_spec, stdin = _test_io()
            if io_spec is not None:  # the test set sys.stdin or patched input/print: the call sees them
                op, args = "callio", (io_spec, *args)
            elif sys.stdout is not _STDOUT:  # the test captures prints: have the program's returned
                op = "callout"
        self.nesting += 1
        try:
            if self.nesting > MAX_NESTING:
                raise CallbackLimit(f"calls between the tests and the program nested over {MAX_NESTING} deep")
            self._send((op, ref, args, kwargs))
            while True:
                msg = self.recv()
                if msg[0] not in grammar.CALLBACK_KINDS:
                    break
                self._callback(msg)
        finally:
            self.nesting -= 1
        if io_spec is not None:
            args = args[1:]
        try:
            reply = grammar.parse_reply(msg, len(args))
        except wire.WireError as e:
            raise CandidateGone(str(e)) from None
        kind = reply[0]
        if kind == "stop":
            raise StopIteration
        if kind == "time":
            raise TimeLimit
        if kind == "exc":
            raise candidate_exception(reply[1], reply[2])
        _, value, wb, out, consumed = reply
        if stdin is not None:  # advance the test's stdin past what the program read
            _consume(stdin, consumed)
        for key, new in wb:  # the program changed a mutable argument: so does the test's object
            write_back(args[key] if type(key) is int else kwargs.get(key), new)
        if out:
            sys.stdout.write(out)
        return args[value] if kind == "same" else value


_STDOUT = sys.stdout
_STDIN = sys.stdin
_INPUT, _PRINT = builtins.input, builtins.print
MAX_STDIN = 8 << 20
"""Characters of a test's replaced sys.stdin sent with one call."""


def _test_io() -> tuple[list | None, tuple | None]:
    """What a call must carry when the test replaced sys.stdin or patched input/print: ([stdin text or None,
    input or None, print or None, capture prints, stdin has bytes], (the test's stdin, its position)) or
    (None, None)."""
    stdin = sys.stdin if sys.stdin is not _STDIN else None
    inp = builtins.input if builtins.input is not _INPUT else None
    out = builtins.print if builtins.print is not _PRINT else None
    if stdin is None and inp is None and out is None:
        return None, None
    text, where, binary = None, None, False
    if stdin is not None:
        binary = hasattr(stdin, "buffer")  # (a TextIOWrapper or a file: the program may read its bytes)
        try:
            pos = stdin.tell()
            text = stdin.read(MAX_STDIN)
            where = (stdin, pos)
        except (OSError, ValueError, AttributeError):
            text = ""
    wrap = lambda fn: (lambda *a, **k: fn(*a, **k)) if fn is not None else None  # noqa: E731 - a callback
    return [text, wrap(inp), wrap(out), sys.stdout is not _STDOUT, binary], where


def _consume(stdin: tuple, consumed: int) -> None:
    f, pos = stdin
    try:
        f.seek(pos)
        f.read(consumed)
    except (OSError, ValueError, AttributeError):
        pass


def classify(e: BaseException) -> tuple[str, str, str]:
    """(status, error_type, message) for an exception raised while running a test."""
    if isinstance(e, CallbackLimit):
        return "error", "CallbackLimit", str(e)
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
