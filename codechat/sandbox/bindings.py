"""Judge side, before and around the tests: which names the tests get, counted checks, arguments written back.

- `build_namespace`: the judge's globals for a job: the program's names the tests mention (as proxies or plain
  values), never dunders, builtins or modules (the judge imports those itself); `bind_entry_point`.
- `instrument`: a test compiled with every check counted (`_CountAsserts`) and the program's copied globals read
  fresh (`_LiveGlobals`); `names_in`: the names it mentions.
- `write_back`: a program's mutation of a mutable argument applied to the test's own object.
Nothing here runs program code: values from the program arrive as plain data or `Remote` proxies (judge.py).
"""
from __future__ import annotations

import ast
import builtins
import collections
import importlib
import sys
import types

from codechat.sandbox import judge_objects, wire

_MUTABLE = (list, dict, set, bytearray, collections.deque)


def write_back(old, new) -> None:
    """Make the judge's argument `old` equal the program's `new` in place (nested lists/dicts element-wise,
    so rows of a matrix keep their identity). Only builtin containers of the same type are changed, and
    instances of the task's classes, from the program's copy rebuilt here (judge_objects.copy_state)."""
    if type(old) is type(new) and judge_objects.is_task_instance(old):
        if old is not new:
            judge_objects.copy_state(old, new)
        return
    if type(old) is not type(new) or type(old) not in _MUTABLE or old == new:
        return
    if type(old) is list and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if type(a) is type(b) and (type(a) in _MUTABLE or judge_objects.is_task_instance(a)):
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


LIVE = "__codechat_global__"
"""The judge's function a test's read of a program's copied module global becomes: the value now (modes.py)."""


class _LiveGlobals(ast.NodeTransformer):
    """Reads of the program's copied module globals (`COUNT`) become `__codechat_global__('COUNT')`, so a test
    sees the value after the program changed it. A name the test binds itself stays the test's."""

    def __init__(self, names: frozenset):
        self.names = names

    def visit_Name(self, node: ast.Name):
        if node.id in self.names and isinstance(node.ctx, ast.Load):
            call = ast.Call(ast.Name(LIVE, ast.Load()), [ast.Constant(node.id)], [])
            return ast.copy_location(call, node)
        return node


def _bound(tree: ast.AST) -> set:
    """Every name a test binds: assignments, deletions, parameters, definitions, imports, handlers, globals."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            out.update(n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            out.add(n.rest)
    return out


_COMPILED: dict[tuple[str, str, frozenset], types.CodeType] = {}
_NAMES: dict[str, tuple[frozenset, frozenset]] = {}
_CACHE_MAX = 20000
"""Compiled tests and their name sets kept per judge (keyed by the task's own text, not the program's)."""


def instrument(src: str, name: str, live: frozenset = frozenset()) -> types.CodeType:
    """Compile a test with every check counted and its reads of `live` (the program's copied globals) made
    fresh; cached, since RL verifies the same task many times."""
    key = (src, name, live)
    code = _COMPILED.get(key)
    if code is None:
        tree = ast.parse(src)
        if live:
            tree = _LiveGlobals(live - _bound(tree)).visit(tree)
        tree = _CountAsserts().visit(tree)
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


_CAUGHT: dict[str, frozenset] = {}


def caught_in(src: str) -> frozenset:
    """Names `src` catches as exceptions: `except NAME`, `except (A, B)`, `raises(NAME)`, `assertRaises(NAME)`
    (cached: the same tests come with every program)."""
    got = _CAUGHT.get(src)
    if got is None:
        if len(_CAUGHT) > _CACHE_MAX:
            _CAUGHT.clear()
        got = _CAUGHT[src] = _caught(src)
    return got


def _caught(src: str) -> frozenset:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return frozenset()
    out = set()
    for node in ast.walk(tree):
        kinds = None
        if isinstance(node, ast.ExceptHandler):
            kinds = node.type
        elif isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in ("raises", "assertRaises", "assertRaisesRegex"):
            kinds = node.args[0]
        for k in (kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]):
            if isinstance(k, ast.Name):
                out.add(k.id)
    return frozenset(out)


_STDLIB = frozenset(sys.stdlib_module_names)
_MODULES = _STDLIB - {"this", "antigravity", "idlelib", "turtle", "turtledemo",
                                                  "tkinter", "venv", "ensurepip", "pydoc", "webbrowser"}
"""Top-level modules the judge imports itself when a test uses `NAME.attr` and the task does not define NAME."""
_ALIASES = {"np": "numpy", "numpy": "numpy"}
"""Conventional aliases of non-stdlib modules a test may use the same way (`np.allclose`)."""


def build_namespace(chan, entries: list, entry_point: str | None, wanted: frozenset,
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
                ns[name] = wire.from_plain(val, chan)
            except wire.WireError:
                continue
        else:
            ns[name] = chan.proxy(("n", name), val)
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

def bind_entry_point(chan, ns: dict, entry_point: str | None) -> None:
    """The function under test is always the program's, even when named like a builtin (MBPP 126: `sum`)."""
    if entry_point and wire.plain_name(entry_point):
        ns[entry_point] = chan.proxy(("n", entry_point), "function")
