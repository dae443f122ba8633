"""The candidate side: runs untrusted code and answers the judge's requests with plain data.

Runs inside the sandboxed child (own uid, limits, no network). It reads its payload (code + setup) from a pipe
nobody else reads, executes it in a fresh module, reports the names it defined, then serves requests from the
judge: call / getattr / setattr / getitem / len / iter / next on its objects. Every reply is plain data
(`wire.to_plain`); objects that are not plain data stay here and travel as handles.

Nothing here is trusted: the program may patch this module, the encoder, or write anything to the socket.
The design does not depend on it: the judge only ever receives plain values and never sends the tests.

An audit hook reports the first time the program touches the network, starts a process, sends a signal,
loads native code, or writes outside its working directory (Verdict.blocked); it observes, the OS enforces.
"""
from __future__ import annotations

import builtins
import _pickle
import io
import marshal
import os
import sys
import types

from codechat.sandbox import stdio_run, wire

EVENTS = {
    "socket.connect": "network", "socket.bind": "network", "socket.sendto": "network",
    "socket.getaddrinfo": "network", "subprocess.Popen": "subprocess", "os.system": "subprocess",
    "os.exec": "subprocess", "os.posix_spawn": "subprocess", "os.spawn": "subprocess", "os.fork": "subprocess",
    "os.forkpty": "subprocess", "os.kill": "signal", "os.killpg": "signal", "signal.pthread_kill": "signal",
    "ctypes.dlopen": "ctypes", "ctypes.dlsym": "ctypes",
}
WRITE_EVENTS = {"open", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
                "os.link", "os.truncate", "shutil.rmtree"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _install_audit_hook(events_fd: int, cwd: str) -> None:
    seen: set[str] = set()

    def report(kind: str) -> None:
        if kind not in seen:
            seen.add(kind)
            try:
                os.write(events_fd, kind.encode() + b"\n")
            except OSError:
                pass

    def hook(event: str, args: tuple) -> None:
        kind = EVENTS.get(event)
        if kind is not None:
            report(kind)
        elif event in WRITE_EVENTS and args:
            if event == "open":
                path, mode, flags = (tuple(args) + (None, None))[:3]
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                          (isinstance(flags, int) and flags & _WRITE_FLAGS and mode is None)
                if not writing:
                    return
            else:
                path = args[0]
            if isinstance(path, (str, bytes)):
                p = os.path.abspath(os.fsdecode(path))
                if not (p == cwd or p.startswith(cwd + os.sep) or p.startswith("/dev/null")):
                    report("write_outside")

    sys.addaudithook(hook)


class _Unpickler(_pickle.Unpickler):  # (_pickle: the zygote does not import pickle.py)
    server: "_Server"

    def persistent_load(self, pid):  # a judge-side proxy: the object it stands for lives here
        return self.server.resolve(pid)


class _Server:
    def __init__(self, sock_fd: int, module: types.ModuleType):
        self.fd = sock_fd
        self.mod = module
        self.objects: dict[int, object] = {}

    def handle(self, obj: object) -> int:
        self.objects[id(obj)] = obj
        return id(obj)

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
        try:
            data = wire.dumps(msg, handle=self.handle)
        except BaseException as e:  # noqa: BLE001 - unencodable result (too deep, recursion): tell the judge
            data = wire.dumps(["exc", "WireError", f"result is not plain data: {type(e).__name__}"])
        wire.send(self.fd, data)

    def serve(self) -> None:
        while True:
            try:
                op, ref, args, kwargs = self.unpickle(wire.recv(self.fd))  # (not wire.Reader: fewer pages)
            except wire.WireError:
                return  # the judge is done
            try:
                target = self.resolve(ref)
                if op == "call":
                    value = target(*args, **kwargs)
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
                        self.reply(["stop"])
                        continue
                else:
                    raise ValueError(f"unknown op {op}")
                self.reply(["ok", value])
            except BaseException as e:  # noqa: BLE001 - SystemExit and friends are answers too
                self.reply(["exc", _name(e), _msg(e)])


def _name(e: BaseException) -> str:
    try:
        return str(type(e).__name__)[:100]
    except BaseException:  # noqa: BLE001
        return "Exception"


def _msg(e: BaseException) -> str:
    try:
        return str(e)[:300]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return ""


def _describe(name: str, value: object) -> list:
    if isinstance(value, types.ModuleType):
        return [name, "module", value.__name__]
    if isinstance(value, (int, float, str, bytes, tuple, list, dict, set, frozenset, complex, type(None))):
        try:
            return [name, "value", wire.to_plain(value)]
        except BaseException:  # noqa: BLE001
            pass
    return [name, "object", type(value).__name__[:100]]


def serve(sock_fd: int, payload_fd: int, events_fd: int) -> None:
    """Entry point in the sandboxed child; returns when the judge closes the channel."""
    payload = marshal.loads(wire.recv(payload_fd))  # written by the parent (marshal: less to touch than pickle)
    os.close(payload_fd)
    if "stdin" in payload:  # a stdin/stdout job: run as __main__, stdout to the judge (stdio_run.py)
        return stdio_run.serve(sock_fd, payload, lambda: _install_audit_hook(events_fd, os.getcwd()))
    # (the zygote does not import `random`, so each program that does gets a fresh seed)
    mod = types.ModuleType("__sandbox__")
    mod.__dict__["__builtins__"] = builtins
    sys.modules["__sandbox__"] = mod
    _install_audit_hook(events_fd, os.getcwd())
    server = _Server(sock_fd, mod)
    try:
        code = compile(payload["code"], "<candidate>", "exec", dont_inherit=True)
    except BaseException as e:  # noqa: BLE001
        server.reply(["load_error", "SyntaxError" if isinstance(e, SyntaxError) else _name(e), _msg(e)])
        return
    try:
        exec(code, mod.__dict__)
        if payload.get("setup"):
            exec(compile(payload["setup"], "<setup>", "exec", dont_inherit=True), mod.__dict__)
    except BaseException as e:  # noqa: BLE001
        server.reply(["load_error", _name(e), _msg(e)])
        return
    names = [_describe(k, v) for k, v in list(mod.__dict__.items()) if not k.startswith("__")]
    server.reply(["loaded", names])
    server.serve()
