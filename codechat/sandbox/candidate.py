"""The candidate side: runs untrusted code and answers the judge's requests with plain data.

Runs inside the sandboxed child (own uid, limits, no network). It reads its payload (code + setup) from a pipe
nobody else reads, executes it in a fresh module, reports the names it defined, then serves requests from the
judge: call / getattr / setattr / getitem / len / iter / next on its objects. Every reply is plain data
(`wire.to_plain`); objects that are not plain data stay here and travel as handles.

Nothing here is trusted: the program may patch this module, the encoder, or write anything to the socket.
The design does not depend on it: the judge only ever receives plain values and never sends the tests.

Before the program runs, `audit_hook.install` starts reporting what it touches (Verdict.blocked).
"""
from __future__ import annotations

import builtins
import collections
import _pickle
import _signal
import io
import marshal
import os
import sys
import types

from codechat.sandbox import audit_hook, frames, prints, stdio_run, wire

class _Unpickler(_pickle.Unpickler):  # (_pickle: the zygote does not import pickle.py)
    server: "_Server"

    def persistent_load(self, pid):  # a judge-side proxy: the object it stands for lives here
        if pid[0] == "j":  # one of the tests' objects: using it calls back into the judge
            return self.server.judge_proxy(pid[1])
        return self.server.resolve(pid)


class _JudgeObj:
    """One of the tests' objects given to the program (a function, a generator, or an instance or class the
    tests define): a call, an attribute read or write, `iter()` or `next()` sends a CALLBACK (plain data) to the
    judge, which does it there and answers; requests the judge makes meanwhile (the test's function called the
    program) are served as usual. One proxy per object, so `is` holds between references to the same one."""
    __slots__ = ("_server", "_jid")

    def __init__(self, server: "_Server", jid: int):
        object.__setattr__(self, "_server", server)
        object.__setattr__(self, "_jid", jid)

    def __call__(self, *args, **kwargs):
        return self._server.callback(["cb", self._jid, list(args), [[k, v] for k, v in kwargs.items()]])

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._server.callback(["cbget", self._jid, name])

    def __setattr__(self, name: str, value) -> None:
        self._server.callback(["cbset", self._jid, name, value])

    def __iter__(self):  # a test's generator (or iterable) is iterated where it lives, one item per callback
        return self._server.callback(["cbiter", self._jid])

    def __next__(self):
        return self._server.callback(["cbnext", self._jid])

    def __repr__(self) -> str:
        return "<a test's object>"


MAX_OBJECTS = 10000
"""Instances of the program's classes one reply sends as fields (an instance met twice goes twice, as equal
copies); past it, and for an instance inside itself (a cycle), they travel as handles."""


class _Server:
    def __init__(self, sock_fd: int, module: types.ModuleType):
        self.fd = sock_fd
        self.mod = module
        self.objects: dict[int, object] = {}
        self.proxies: dict[int, _JudgeObj] = {}
        self.path: set[int] = set()  # objects being encoded (an object inside itself: a cycle, sent as a handle)
        self.budget = MAX_OBJECTS
        self.in_call = False  # running the program's code for the judge (a time limit may interrupt it)

    def handle(self, obj: object) -> int:
        self.objects[id(obj)] = obj
        return id(obj)

    def judge_proxy(self, jid: int) -> _JudgeObj:
        p = self.proxies.get(jid)
        if p is None:
            p = self.proxies[jid] = _JudgeObj(self, jid)
        return p

    def callback(self, msg: list):
        """Send a CALLBACK; serve the judge's requests until it answers; return its result or raise its error.
        The wait is not the program's time: a time limit reached meanwhile interrupts it once it runs again."""
        outer, self.in_call = self.in_call, False
        try:
            self.reply(msg)
            while True:
                op, ref, a, kw = self.unpickle(frames.recv(self.fd))
                if op == "cbret":
                    return a[0]
                if op == "cbexc":
                    base = getattr(builtins, str(a[0]), None)
                    raise (base if isinstance(base, type) and issubclass(base, Exception) else Exception)(a[1])
                self.answer(op, ref, a, kw)
        finally:
            self.in_call = outer

    def encode(self, x: object, depth: int) -> object:
        """A value in a reply that is not builtin data: one of the tests' objects given back, an instance of a
        class of this module (its fields, so the judge can rebuild it as the task's class of that name, else
        it keeps the handle), else a handle."""
        t = type(x)
        if t is _JudgeObj:
            return {"$j": object.__getattribute__(x, "_jid")}
        if depth > wire.MAX_DEPTH:  # past the nesting cap: a handle, whose items the judge reads on demand
            return wire.handle_tag(self.handle(x), x)
        if t.__dict__.get("__module__") == "__sandbox__" and self.budget > 0 and id(x) not in self.path:
            self.path.add(id(x))
            self.budget -= 1
            name = str(t.__name__)[:wire.MAX_TYPE]
            try:
                if isinstance(x, tuple):
                    return {"$o": name, "t": [wire.to_plain(v, self.encode, depth + 1) for v in tuple.__iter__(x)]}
                fields = [[k, wire.to_plain(v, self.encode, depth + 1)] for k, v in _fields(x)]
                return {"$o": name, "h": self.handle(x), "f": fields}
            except wire.WireError:  # too deep, or a field that is not data: the object stays a handle
                if isinstance(x, tuple):
                    raise
            finally:
                self.path.discard(id(x))
        if isinstance(x, tuple):
            return {"$t": [wire.to_plain(v, self.encode, depth) for v in tuple.__iter__(x)]}
        return wire.handle_tag(self.handle(x), x)

    def resolve(self, ref: tuple) -> object:
        kind, key = ref
        if kind == "n":
            try:
                return self.mod.__dict__[key]
            except KeyError:
                raise NameError(f"name '{key}' is not defined") from None
        return self.objects[key]

    def unpickle(self, data: bytes):
        if data[:1] == b"p":  # no proxies inside (the judge, trusted, says so): plain C unpickling
            return _pickle.loads(data[1:])
        u = _Unpickler(io.BytesIO(data[1:]))
        u.server = self
        return u.load()

    def reply(self, msg: list) -> None:
        self.path.clear()
        self.budget = MAX_OBJECTS
        try:
            data = wire.dumps(msg, handle=self.encode)
        except BaseException as e:  # noqa: BLE001 - unencodable result (too deep, recursion): tell the judge
            data = wire.dumps(["exc", "WireError", f"result is not plain data: {type(e).__name__}"])
        frames.send(self.fd, data)

    def serve(self) -> None:
        while True:
            try:
                op, ref, args, kwargs = self.unpickle(frames.recv(self.fd))  # (not frames.Reader: fewer pages)
            except wire.WireError:
                return  # the judge is done
            self.answer(op, ref, args, kwargs)

    def answer(self, op: str, ref: tuple, args: tuple, kwargs: dict) -> None:
        """Serve one request of the judge (the reply is sent here, outside the program's time budget)."""
        if op == "limit":  # a test starts: its time budget (no reply)
            try:
                return self.arm(float(args[0]), bool(args[1]))
            except (ValueError, OverflowError, TypeError):  # (the judge sends a finite positive budget)
                return None
        outer, self.in_call = self.in_call, True
        try:
            msg = self._run(op, self.resolve(ref), args, kwargs)
        except _TimeLimit:
            msg = ["time"]
        except BaseException as e:  # noqa: BLE001 - SystemExit and friends are answers too
            msg = ["exc", _name(e), _msg(e)]
        finally:
            self.in_call = outer
        self.reply(msg)

    def _run(self, op: str, target: object, args: tuple, kwargs: dict) -> list:
        """Do one request on the program's object; the reply to send."""
        if op == "call":
            return _call_reply(target(*args, **kwargs), args, kwargs, "")
        if op == "callout":  # the test captures prints: capture this call's, capped, and return them
            out, sys.stdout = sys.stdout, prints.Capped()
            try:
                value = target(*args, **kwargs)
            finally:
                out, sys.stdout = sys.stdout, out
            return _call_reply(value, args, kwargs, out.text())
        if op == "callio":  # the test set sys.stdin or patched input/print: the call runs with them
            return self._call_io(target, args[0], args[1:], kwargs)
        if op == "value":  # a module global's value now (the judge's copy from load is stale after a call)
            value = target
        elif op == "getattr":
            value = getattr(target, args[0])
        elif op == "setattr":
            value = setattr(target, args[0], args[1])
        elif op == "getitem":
            value = target[args[0]]
        elif op == "len":
            value = len(target)
        elif op == "bool":
            value = bool(target)
        elif op == "iter":
            value = iter(target)
        elif op == "next":
            try:
                value = next(target)
            except StopIteration:
                return ["stop"]
        else:
            raise ValueError(f"unknown op {op}")
        return ["ok", value]

    def _call_io(self, target, spec: list, args: tuple, kwargs: dict) -> list:
        text, inp, out, capture, binary = spec
        saved = sys.stdin, sys.stdout, builtins.input, builtins.print
        stdin = (_BinaryStdin if binary else io.StringIO)(text) if isinstance(text, str) else None
        cap = prints.Capped() if capture else None
        try:
            if stdin is not None:
                sys.stdin = stdin
            if inp is not None:
                builtins.input = inp
            if out is not None:
                builtins.print = out
            if cap is not None:
                sys.stdout = cap
            value = target(*args, **kwargs)
            printed = cap.text() if cap is not None else ""
        finally:
            sys.stdin, sys.stdout, builtins.input, builtins.print = saved
        reply = _call_reply(value, args, kwargs, printed)
        if len(reply) == 2:
            reply += [[], ""]
        return reply + [(stdin.consumed() if binary else stdin.tell()) if stdin is not None else 0]

    def arm(self, budget_s: float, cpu: bool) -> None:
        """Interrupt the program's calls once this test's budget is spent (CPU or wall clock): the timer's
        handler raises `_TimeLimit` inside the program's code, or, when the program is not running (waiting
        for the judge), tries again 10 ms later."""
        which = _signal.ITIMER_PROF if cpu else _signal.ITIMER_REAL

        def on_timer(signum, frame):
            if self.in_call:
                raise _TimeLimit
            _signal.setitimer(which, 0.01)

        _signal.signal(_signal.SIGPROF if cpu else _signal.SIGALRM, on_timer)
        _signal.setitimer(which, max(budget_s, 0.001))


class _BinaryStdin(io.StringIO):
    """A test's stdin text that also has `.buffer`, as the test's own stdin had (a TextIOWrapper, a file): a
    program reads either its text or its bytes (`sys.stdin.buffer.read()`); `consumed` counts characters."""
    _buf: io.BytesIO | None = None
    _start = 0

    @property
    def buffer(self) -> io.BytesIO:
        if self._buf is None:
            self._start = self.tell()
            self._buf = io.BytesIO(self.getvalue()[self._start:].encode("utf-8", "surrogateescape"))
        return self._buf

    def consumed(self) -> int:
        if self._buf is None:
            return self.tell()
        return self._start + len(self._buf.getvalue()[:self._buf.tell()].decode("utf-8", "surrogateescape"))


class _TimeLimit(BaseException):
    """Raised in the program's code when the test's time budget is spent (see `_Server.arm`)."""


def _on_cpu_limit(signum, frame):
    raise _TimeLimit


_MUTABLE = (list, dict, set, bytearray, collections.deque)


def _fields(x: object) -> list:
    """An instance's attributes (its __dict__ and slots), those with plain names, at most wire.MAX_FIELDS."""
    d = getattr(x, "__dict__", None)
    items = [(k, v) for k, v in d.items() if wire.plain_name(k)] if type(d) is dict else []
    for cls in type(x).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for k in ((slots,) if isinstance(slots, str) else slots):
            if wire.plain_name(k) and hasattr(x, k):
                items.append((k, getattr(x, k)))
    if len(items) > wire.MAX_FIELDS:
        raise wire.WireError("too many fields")
    return items


def _written(a: object) -> bool:
    """Whether argument `a` goes back to the judge after a call: a builtin mutable container, or an instance
    of a class of this module (the setup's `Point`, `ListNode`: an in-place change to it reaches the test)."""
    t = type(a)
    return t in _MUTABLE or (t.__dict__.get("__module__") == "__sandbox__" and not isinstance(a, tuple))


def _call_reply(value: object, args: tuple, kwargs: dict, out: str) -> list:
    """The reply to a call: the result (or which argument it is, so `f(a) is a` holds in the test), the
    mutable arguments as they are now (the judge writes them back to the test's objects), captured prints."""
    wb = [[i, a] for i, a in enumerate(args) if _written(a)]
    wb += [[k, a] for k, a in kwargs.items() if _written(a)]
    same = next((i for i, a in enumerate(args) if a is value), None)
    if same is not None:
        return ["same", same, wb, out]
    return ["ok", value, wb, out] if wb or out else ["ok", value]


def _name(e: BaseException) -> str:
    try:
        return str(type(e).__name__)[:wire.MAX_TYPE]
    except BaseException:  # noqa: BLE001
        return "Exception"


def _msg(e: BaseException) -> str:
    try:
        return str(e)[:wire.MAX_MSG]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return ""


_SMALL_ITEMS = 10_000
"""Module globals larger than this (items, or characters) cross to the judge as proxies, read on demand: a
program's sieve or factorial table is not copied into the load message."""


def _small(value) -> bool:
    try:
        if isinstance(value, (str, bytes)):
            return len(value) <= 100 * _SMALL_ITEMS
        if isinstance(value, (tuple, list, dict, set, frozenset)):
            inner = dict.values(value) if isinstance(value, dict) else value
            return len(value) <= _SMALL_ITEMS and sum(
                len(v) if isinstance(v, (str, bytes, tuple, list, dict, set, frozenset)) else 1
                for v in inner) <= 10 * _SMALL_ITEMS
        return True
    except BaseException:  # noqa: BLE001 - a hostile container
        return False


def _describe(name: str, value: object) -> list:
    if isinstance(value, types.ModuleType):
        return [name, "module", value.__name__]
    if isinstance(value, (int, float, str, bytes, tuple, list, dict, set, frozenset, complex, type(None))) \
            and _small(value):
        try:
            return [name, "value", wire.to_plain(value)]
        except BaseException:  # noqa: BLE001
            pass
    return [name, "object", type(value).__name__[:100]]


def serve(sock_fd: int, payload_fd: int, events_fd: int) -> None:
    """Entry point in the sandboxed child; returns when the judge closes the channel."""
    payload = marshal.loads(frames.recv(payload_fd))  # written by the parent (marshal: less to touch than pickle)
    os.close(payload_fd)
    if "stdin" in payload:  # a stdin/stdout job: run as __main__, stdout to the judge (stdio_run.py)
        return stdio_run.serve(sock_fd, payload, lambda: audit_hook.install(events_fd, os.getcwd()))
    # (the zygote does not import `random`, so each program that does gets a fresh seed)
    mod = types.ModuleType("__sandbox__")
    mod.__dict__["__builtins__"] = builtins
    sys.modules["__sandbox__"] = mod
    audit_hook.install(events_fd, os.getcwd())
    server = _Server(sock_fd, mod)
    try:
        code = compile(payload["code"], "<candidate>", "exec", dont_inherit=True)
    except BaseException as e:  # noqa: BLE001
        server.reply(["load_error", "SyntaxError" if isinstance(e, SyntaxError) else _name(e), _msg(e)])
        return
    if payload.get("mode") in ("tests", "io", "call"):  # function tasks: prints are never the answer
        sys.stdout, sys.stderr = prints.Quiet(sys.stdout), prints.Quiet(sys.stderr)
    # the soft CPU limit (process 1 of a PID namespace ignores it without a handler) ends the program's code
    # as a time limit, loading included; the hard limit a second later still kills it
    _signal.signal(_signal.SIGXCPU, _on_cpu_limit)
    try:
        # The task's setup first, so the program's annotations and calls can use its classes (`p: Point`); a setup
        # that builds objects from the program's own classes (MBPP 367: `root = Node(1)`) runs after it instead.
        # The judge runs its own copy for the tests, so nothing the program redefines reaches them.
        setup = compile(payload["setup"], "<setup>", "exec", dont_inherit=True) if payload.get("setup") else None
        if setup is not None:
            try:
                exec(setup, mod.__dict__)
                setup = None
            except NameError:
                pass
        exec(code, mod.__dict__)
        if setup is not None:
            exec(setup, mod.__dict__)
    except BaseException as e:  # noqa: BLE001
        server.reply(["load_error", _name(e), _msg(e)])
        return
    names = [_describe(k, v) for k, v in list(mod.__dict__.items()) if not k.startswith("__")]
    server.reply(["loaded", names])
    server.serve()
