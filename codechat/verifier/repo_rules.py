"""The repository judge's rules, as plain functions: which edits are dropped, which added lines are refused,
which test-patch files are run, and how a task's test ids are matched to the tests the runner collected.

Edits dropped (never applied): the task's protected globs; conftest files anywhere; every file pytest reads
configuration from (`pytest.ini`, `.pytest.ini`, `pytest.toml`, `.pytest.toml`, `tox.ini`, `setup.cfg`,
`pyproject.toml`); `.pth` files and `sitecustomize`/`usercustomize`; and a *top-level* module or package named
like one the standard library or the runner imports (`json.py`, `pytest/`), unless the base tree already holds
it: only top-level names shadow an import (the workspace root or `src/` is first on the path), and only a new
one changes what is imported. A nested `pkg/numbers.py` shadows nothing.

Added lines refused (the change is `rejected`): frame walking (`f_back`, `f_globals`, `f_locals`, a traceback's or
generator's frame, other threads' frames), tracing and
profiling hooks, `os._exit`, `gc` object walks, `ctypes`, `PYTEST_*` variables, and, outside the runner's own
packages (`_pytest`, `pytest`, `pluggy`, which a pytest-dev task edits honestly), `_pytest`, `pluggy` and
pytest hook names. `sys.modules` is allowed: the runner checks its functions' identity after the run, which
catches a replacement made through it.

Test ids (`resolve_ids`): pytest node ids; unittest style `name (module.Class)` or `name (module.Class.name)`
(django; `module` is the file's or, for a TestCase imported into another test module, its class's); a docstring first
line (django's verbose runner prints it instead of the name); a bare function name (sympy); an id SWE-bench cut
at a space (`test_x[a-`) matched by prefix, with a warning. An id that matches nothing collected is
`unknown test id`, listed apart from the failures.
"""
from __future__ import annotations

import re
import sys

CONFIG_FILES = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
                          "pyproject.toml", "conftest.py", "sitecustomize.py", "usercustomize.py"})
SHADOW_NAMES = frozenset(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "iniconfig", "packaging",
                                                     "py", "exceptiongroup", "tomli", "pygments"}
RUNNER_PACKAGES = frozenset({"_pytest", "pytest", "pluggy"})
HAZARD = re.compile(r"settrace|setprofile|\bos\._exit\b|gc\.get_(?:objects|referrers|referents)|\bctypes\b|"
                    r"\bPYTEST_|\bf_back\b|\bf_globals\b|\bf_locals\b|\bsys\._getframe\b|\binspect\.(?:stack|currentframe)\b|"
                    r"\btb_frame\b|\b_current_frames\b|\b(?:gi|cr|ag)_frame\b")
RUNNER_NAMES = re.compile(r"\b_pytest\b|\bpluggy\b|"
                          r"\bpytest_(?:runtest|pyfunc|collect|configure|sessionfinish|report|load_initial|cmdline)")
DATA_SUFFIXES = (".py",)


def drop_reason(path: str, is_protected, base_has=lambda top: False) -> str | None:
    """Why an edit of `path` is dropped, or None to keep it (`is_protected`: the task's glob check;
    `base_has(top)`: whether the base tree already holds that top-level module or package, in which case
    editing it shadows nothing new: pytest-dev/pytest's own `src/_pytest/`)."""
    parts = path.split("/")
    name = parts[-1]
    if is_protected(path) or name in CONFIG_FILES or name.endswith(".pth"):
        return "protected"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        # An unchecked-hash .pyc is imported without reading its source: code that differs from what the
        # change shows, possibly for a protected test module. Bytecode is never part of a change.
        return "compiled bytecode"
    top = parts[1] if parts[0] == "src" and len(parts) > 1 else parts[0]
    stem = top[:-3] if top.endswith(".py") else top
    top_path = "/".join(parts[:2] if parts[0] == "src" else parts[:1])
    if (len(parts) > 1 or top.endswith(".py")) and stem in SHADOW_NAMES and top != "src" and not base_has(top_path):
        return f"shadows module {stem}"
    return None


def hazard(path: str, line: str) -> str | None:
    """The hazardous token an added line of `path` holds, or None."""
    m = HAZARD.search(line)
    if m:
        return m[0]
    if RUNNER_PACKAGES & set(path.split("/")[:-1]):
        return None  # the repository is the runner (pytest-dev/pytest): its own names are its own code
    m = RUNNER_NAMES.search(line)
    return m[0] if m else None


def test_targets(patch_paths: list[str]) -> list[str]:
    """The files of a test patch the runner is given: Python test modules (data files and conftest/__init__
    are written, not run)."""
    return sorted(p for p in patch_paths if p.endswith(".py") and p.rsplit("/", 1)[-1] not in
                  ("conftest.py", "__init__.py"))


_UNITTEST = re.compile(r"(\w+) \(([\w.]+)\)")


def is_truncated(wanted: str) -> bool:
    return "::" in wanted and wanted.count("[") > wanted.count("]")


def _base(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def matches(wanted: str, nodeid: str, doc: str = "", module: str = "") -> bool:
    """Does a task's test id name this collected test (pytest node id `nodeid`, docstring first line `doc`,
    `module`: where its class or function is defined, which for a TestCase imported into another test module is
    not the file it was collected from)?"""
    if wanted == nodeid:
        return True
    if "::" in wanted:
        return is_truncated(wanted) and nodeid.startswith(wanted)
    m = _UNITTEST.fullmatch(wanted)
    if m:
        name, dotted = m.groups()
        if dotted.endswith("." + name) and dotted.count(".") >= 2:  # Python 3.11+: `name (module.Class.name)`
            dotted = dotted[:-len(name) - 1]
        mod, _, cls = dotted.rpartition(".")
        path, _, rest = nodeid.partition("::")
        dotted_path = path[:-3].replace("/", ".")
        return rest == f"{cls}::{name}" and any(d == mod or d.endswith("." + mod) for d in (dotted_path, module) if d)
    if re.fullmatch(r"\w+", wanted):
        return _base(nodeid).rsplit("::", 1)[-1] == wanted
    return bool(doc) and wanted.strip() == doc.strip()


def well_formed(wanted: str) -> bool:
    """False for ids no runner could produce (SWE-bench log-parsing debris such as `[100%]`)."""
    w = wanted.strip()
    return bool(w) and not re.fullmatch(r"\[[\d%\s-]*\]?-*", w)


def resolve_ids(wanted: list[str], tests: dict[str, bool], docs: dict[str, str] | None = None,
                modules: dict[str, str] | None = None) -> dict:
    """{"passed": [...], "failed": [...], "unknown": [...], "warnings": [...]} for the ids in `wanted` against
    the run's `tests` (node id -> passed). An id naming several tests (a bare name, a prefix) passes when all do."""
    docs, modules = docs or {}, modules or {}
    out = {"passed": [], "failed": [], "unknown": [], "warnings": []}
    for w in wanted:
        if not well_formed(w):
            out["warnings"].append(f"{w!r}: not a test id, ignored")
            continue
        hits = [n for n in tests if matches(w, n, docs.get(n, ""), modules.get(n, ""))]
        if not hits:
            out["unknown"].append(w)
            continue
        if is_truncated(w) and w not in tests:
            out["warnings"].append(f"{w!r}: truncated id matched by prefix ({len(hits)} test(s))")
        out["passed" if all(tests[n] for n in hits) else "failed"].append(w)
    return out
