"""What keeps the code of a patched repository from steering the pytest run that judges it, inside that run.

Standalone (imports nothing of codechat; `repo_runner.py` loads it by path before any repository code runs).
The invariant every runner of the repository judge keeps (pytest here; a django or sympy runner the same way):
code the change wrote cannot reach the runner's frames or objects through the interpreter, and whatever the
runner decides from (pytest's plugins and hook implementations, the functions that run and report a test,
unittest's assertions, the test modules' bindings of pytest/unittest, the import machinery) is the same when
a test ends as it was before the repository's code first ran.

Code "the change wrote" is known from outside: the judge passes, per file, the line numbers the change added
or replaced (`untrusted`: {path: [lines]}, or None for a whole new file). Code with no real file behind it
(`exec` of a string, a file under /tmp) counts as written by the change too; the base tree's own lines, the
standard library and the environment's packages do not.

- `Guard.hook`, an audit hook (`sys.addaudithook`, which cannot be removed), refuses from code the change
  wrote: frames (`sys._getframe`, `sys._current_frames`, a traceback's, generator's or coroutine's frame),
  `gc` object walks, `ctypes`, new code objects (`code.__new__`/`replace`, `marshal.loads`, `compile` under a
  real path, `function.__new__`, assigning `__code__`); and from anyone: tracing and profiling hooks, opening
  `/proc/*/mem`. The decision is made by the innermost frame that is not a helper that hands frames or
  attributes to its caller (`inspect`, `traceback.walk_stack`/`walk_tb`, `asyncio`, `ctypes`, `string`,
  `bdb`/`pdb`, pytest's `_code`, `logging.currentframe`). Every refusal is also recorded (`violations`): the run is `rejected`.
- On every import the finders in `sys.meta_path` and `sys.path_hooks` are checked: one added or changed
  whose code the change wrote is recorded.
- `Snapshot` holds, taken before any repository code runs, the identity of every hook implementation of
  pytest's plugin manager and of every attribute of the modules and classes that run, call and report a test;
  `Snapshot.changes` lists what differs now (checked as each test ends and at the end of the run): a hook
  implementation added whose function the change wrote or that is no plain function, whatever its plugin or
  module claims to be; one replaced; pytest's own implementations or the dispatch replaced; `assert*` of
  `unittest.TestCase` replaced.
What this cannot see is listed in docs/agent.md ("What does not hold").
"""
import importlib.util
import os
import sys
import types

FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
FROM_WRITTEN = frozenset({"sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
                          "gc.get_referents", "code.__new__", "marshal.loads", "marshal.load", "function.__new__"})
ALWAYS = frozenset({"sys.settrace", "sys.setprofile"})
HELPER_MODULES = ("inspect", "string", "bdb", "pdb")
HELPER_FUNCTIONS = {"traceback": ("walk_stack", "walk_tb", "extract", "_extract_from_extended_frame_gen", "<genexpr>"),
                    "logging": ("<lambda>",)}
"""Functions that hand frames (or their locals) to whoever calls them: `traceback.walk_stack` and
`StackSummary.extract(..., capture_locals=True)`, `logging.currentframe`. Formatting a traceback is no helper."""
HELPER_PACKAGES = ("asyncio", "ctypes")
FINDER_METHODS = ("find_spec", "find_module", "find_loader", "create_module", "exec_module", "load_module",
                  "invalidate_caches", "get_code", "get_data", "get_source")
LOOKED_UP = FINDER_METHODS + ("__call__",)
WRITTEN, GETATTR, SETATTR, COMPILE, IMPORT, TRACE, OPEN = range(7)
EVENT_KINDS = {**dict.fromkeys(FROM_WRITTEN, WRITTEN), "object.__getattr__": GETATTR, "object.__setattr__": SETATTR,
               "object.__delattr__": SETATTR, "compile": COMPILE, "import": IMPORT, "open": OPEN,
               **dict.fromkeys(ALWAYS, TRACE)}
"""What `Guard.hook` does with an event (`ctypes.*` events are checked as WRITTEN; any other event is let pass)."""


def _origin(name):
    """The file of module `name` (a package's `__init__.py`), found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


_STDLIB_HELPERS = None


def _helpers() -> tuple:
    """(helper files, helper dirs, (file, function name) pairs), located without importing them: a helper the
    run imports later is a helper all the same. The standard library's part is found once per process (a warm
    runner's forks inherit it); pytest's `_code` is looked up at each run, once pytest is imported."""
    global _STDLIB_HELPERS
    if _STDLIB_HELPERS is None:
        files = {f for f in map(_origin, HELPER_MODULES) if f}
        dirs = [os.path.join(os.path.dirname(f), "") for f in map(_origin, HELPER_PACKAGES) if f]
        codes = {(f, fn) for f, functions in [(_origin(n), fs) for n, fs in HELPER_FUNCTIONS.items()] if f
                 for fn in functions}
        _STDLIB_HELPERS = (files, dirs, codes)
    files, dirs, codes = _STDLIB_HELPERS
    code_dir = _origin("_pytest._code") if "_pytest" in sys.modules else None
    return set(files), tuple(dirs + ([os.path.join(os.path.dirname(code_dir), "")] if code_dir else [])), set(codes)


class Guard:
    """Classifies code as written by the change or not, and refuses what the change's code may not do."""

    def __init__(self, root: str, untrusted: dict, trusted_dirs: list):
        self.root = os.path.join(root, "")
        self.untrusted = {os.path.join(root, p): (None if lines is None else frozenset(lines))
                          for p, lines in untrusted.items()}
        self.trusted = tuple(os.path.join(d, "") for d in trusted_dirs if d and not d.startswith(self.root))
        self.helper_files, self.helper_dirs, self.helper_codes = _helpers()
        self.violations: list = []
        self.finders = (tuple(sys.meta_path), tuple(sys.path_hooks))
        self._busy = False
        self._cache: dict = {}
        # the import machinery as it is now (no repository code has run) is the baseline, as `finders` is: the
        # path entry finders cached so far (~50 in a warm run, one per package directory) are not vetted again
        # per run; each one is held, so that its id cannot be reused by a finder made later
        self._entries = list(sys.path_importer_cache.values())
        self._vetted: dict = {id(f): f for f in [None] + self._entries}

    def written(self, filename: str, line: int) -> bool:
        """Was the code at `filename:line` written by the change (or does it have no trusted file)?"""
        if filename in self.untrusted:
            lines = self.untrusted[filename]
            return lines is None or line in lines
        kind = self._cache.get(filename)
        if kind is None:
            if filename.startswith(self.root) or filename.startswith(self.trusted):
                kind = "trusted"
            elif filename.startswith("<frozen "):
                kind = "trusted"  # the interpreter's own frozen modules (importlib)
            else:
                kind = "unknown"  # exec'd strings, files under /tmp: no file the judge vouches for
            self._cache[filename] = kind
        return kind == "unknown"

    def _helper(self, code) -> bool:
        f = code.co_filename
        return f in self.helper_files or f.startswith(self.helper_dirs) or (f, code.co_name) in self.helper_codes

    def by_written_code(self, frame) -> bool:
        """Is the innermost frame from `frame` outwards that is not a helper one the change wrote?"""
        while frame is not None:
            code = frame.f_code
            if not self._helper(code):
                return self.written(code.co_filename, frame.f_lineno)
            frame = frame.f_back
        return False

    def hook(self, event: str, args) -> None:
        # called for every audit event of the run (~4,000 in a warm run, most of them `builtins.id`, `exec`,
        # `open`): one dict lookup decides whether the event is one the guard looks at
        if self._busy:
            return
        kind = EVENT_KINDS.get(event)
        if kind is None:
            if not event.startswith("ctypes."):
                return
            check = True
        elif kind == WRITTEN:
            check = True
        elif kind == GETATTR:
            check = args[1] in FRAME_ATTRS
        elif kind == SETATTR:
            check = args[1] == "__code__"
        elif kind == COMPILE:
            check = isinstance(args[1], str) and args[1].startswith("/")
        elif kind == IMPORT:
            self.check_finders()
            return
        elif kind == TRACE:
            self._refuse(event, "tracing and profiling are off in a judged run")
        else:  # OPEN
            path = args[0]
            if isinstance(path, str) and path.startswith("/proc/") and path.endswith("/mem"):
                self._refuse(event, path)
            return
        if not check:
            return
        self._busy = True
        try:
            refuse = self.by_written_code(sys._getframe(1))
        finally:
            self._busy = False
        if refuse:
            self._refuse(event, args[1] if event.startswith("object.") else "")

    def _refuse(self, event: str, what) -> None:
        msg = f"{event} {what}".strip()
        if len(self.violations) < 20:
            self.violations.append(f"refused {msg} from code the change wrote"
                                   if event not in ALWAYS and event != "open" else f"refused {msg}")
        raise RuntimeError(f"codechat judge: {msg} is not allowed in a judged test run")

    def check_finders(self) -> None:
        """Record a finder or path hook added (or a path entry finder cached) since the last check whose code
        the change wrote. Called on import events, and by the runner after each test module is collected and
        as each test ends (importlib.import_module raises no import event)."""
        meta, hooks, entries = list(sys.meta_path), list(sys.path_hooks), list(sys.path_importer_cache.values())
        # compared by identity (`==` would call a finder's own `__eq__`); the same entries as at the last check
        # were vetted then
        if _same_seq(meta, self.finders[0]) and _same_seq(hooks, self.finders[1]) and _same_seq(entries, self._entries):
            return
        self._busy = True
        try:
            old = set(map(id, self.finders[0] + self.finders[1]))
            for f in meta + hooks + entries:
                if id(f) not in old and id(f) not in self._vetted:
                    if not self.trusted_object(f):
                        self.violations.append(f"import hook added by code the change wrote: {type(f).__name__}")
                    self._vetted[id(f)] = f
            self.finders, self._entries = (tuple(meta), tuple(hooks)), entries
        finally:
            self._busy = False

    def trusted_object(self, obj) -> bool:
        """A finder (or path hook) whose methods, looked up as the import system does, all come from code the
        change did not write."""
        if isinstance(obj, (types.FunctionType, types.MethodType)):
            return self.trusted_callable(obj)
        inst = getattr(obj, "__dict__", {}) if not isinstance(obj, type) else {}
        if any(m in inst for m in FINDER_METHODS):
            return False
        loaders = inst.get("_loaders")  # a FileFinder built with loaders of the change's own
        if isinstance(loaders, list) and not all(self.trusted_object(x) for pair in loaders
                                                 for x in (pair if isinstance(pair, tuple) else (pair,))
                                                 if not isinstance(x, str)):
            return False
        for cls in (obj if isinstance(obj, type) else type(obj)).__mro__:
            d = vars(cls)
            for name in LOOKED_UP:
                v = d.get(name)
                if v is not None:
                    v = getattr(v, "__func__", v)
                    if isinstance(v, types.FunctionType) and not self.trusted_callable(v):
                        return False
        return True

    def trusted_callable(self, fn) -> bool:
        """A plain function (or a method of one) whose code the change did not write."""
        fn = getattr(fn, "__func__", fn)
        if type(fn) is not types.FunctionType:
            return False
        code = fn.__code__
        return not self.written(code.co_filename, code.co_firstlineno)


_CALLABLE = (types.FunctionType, types.BuiltinFunctionType, classmethod, staticmethod, property, type)


class Snapshot:
    """Identity of the hook implementations and of the functions and classes the watched modules and classes
    hold, now. `per_test`: the hooks and objects compared as each test ends (the rest at the end of the run)."""

    def __init__(self, pm, guard: Guard, watched: list, per_test: tuple = (), per_test_hooks: tuple = ()):
        self.pm, self.guard = pm, guard
        self.impls = self._impls(None)
        # whole copies of the namespaces (a C-level copy; only the entries that were functions or classes here
        # are compared); `seen`: the deciding hooks' implementations as the last per-test check found them
        self.attrs = [(obj, dict(vars(obj))) for obj in watched]
        self.quick = [(obj, attrs) for obj, attrs in self.attrs if any(obj is o for o in per_test)]
        self.quick_hooks = per_test_hooks
        self.seen = {name: self.impls.get(name, []) for name in per_test_hooks}
        self.exec = getattr(pm, "_inner_hookexec", None)

    def _impls(self, names) -> dict:
        """{hook name: [(implementation, its function, its plugin), ...]} of the hooks `names` (None: all)."""
        out = {}
        hooks = vars(self.pm.hook)
        for name in (hooks if names is None else [n for n in names if n in hooks]):
            caller = hooks[name]
            out[name] = [(impl, impl.function, impl.plugin)
                         for impl in (caller.get_hookimpls() if hasattr(caller, "get_hookimpls") else [])]
        return out

    def changes(self, full: bool = True) -> list:
        """What differs from the snapshot: a hook implementation added whose function the change wrote or that
        is no plain function (whatever its plugin or module claims), or replaced; a watched function or class
        replaced or removed; the plugin manager's dispatch replaced. `full=False`: the per-test subset, where a
        deciding hook whose implementations are those the last per-test check judged is not judged again (what
        that check found stays in the run's record, and the full check at the end compares with the snapshot)."""
        out = []
        if getattr(self.pm, "_inner_hookexec", None) is not self.exec:
            out.append("plugin manager dispatch replaced")
        for name, now in self._impls(None if full else self.quick_hooks).items():
            if not full:
                if _same(now, self.seen.get(name, ())):
                    continue
                self.seen[name] = now
            old = {id(impl): (fn, plugin) for impl, fn, plugin in self.impls.get(name, ())}
            for impl, fn, plugin in now:
                was = old.get(id(impl))
                if was is not None:
                    if fn is not was[0] or plugin is not was[1]:
                        out.append(f"hook implementation replaced: {name}")
                elif not self.guard.trusted_callable(fn):
                    out.append(f"plugin added at run time implements {name}")
        for obj, attrs in (self.attrs if full else self.quick):
            d = vars(obj)
            for name, v in attrs.items():
                if d.get(name) is not v and isinstance(v, _CALLABLE):
                    out.append(f"{getattr(obj, '__name__', '?')}.{name} replaced")
                    break
        return out


def _same_seq(now, then) -> bool:
    """The same objects in the same order (by identity)."""
    return len(now) == len(then) and all(a is b for a, b in zip(now, then))


def _same(now: list, then) -> bool:
    """The same implementations, functions and plugins, by identity (never `==`: a plugin's `__eq__` is code)."""
    return len(now) == len(then) and all(a[0] is b[0] and a[1] is b[1] and a[2] is b[2] for a, b in zip(now, then))
