"""The built-in generated family of small repository tasks: `builtin:repo-train`, `builtin:repo-heldout`.

A task is a package of one to three modules (units from units.py, grouped by module), a README, visible tests
under tests/ (they pass on the buggy code) and a hidden test file for the buggy module (the visible asserts of
its units plus asserts that catch the bug: one pytest function each). One function carries a bug of one kind:
wrong boundary, missing empty-input handling, wrong constant, off-by-one in a loop, or a wrong branch. The
problem statement reports the symptom, computed by running the buggy function (our own template code) on the
first hidden case: "`average([])` raises ZeroDivisionError: division by zero, but it should return 0.0".

Splits differ by composition: a (unit, bug kind) pair is either held out or in train (HELDOUT_PAIRS: one pair per
bug kind), so every bug kind and every unit is seen in train, but held-out tasks need a known fix in a new place.
Seeded: the same (split, n, seed) gives the same tasks. Each task carries its reference fix as
`metadata["solution"]` = {module path: fixed source} (for expert transcripts), and `metadata["wrong_fix"]`, a
plausible but wrong fix (one edit of the correct or the buggy function that passes the visible tests and fails
a hidden one; {} when no edit of MUTATIONS qualifies), and `metadata["wrong_fixes"]`, every such edit then the
module with the bug left in (never empty: several expert transcripts per task, `sft.expert_per_task`).

    from codechat.tasks.repo_family import generate_repo_tasks
    tasks = generate_repo_tasks("heldout", 32, seed=0)     # = load_repo_tasks("builtin:repo-heldout")
"""
from __future__ import annotations

import ast
import random
from dataclasses import replace
from typing import Callable

from codechat.tasks.repo import RepoLimits, RepoTask
from codechat.tasks.repo_family.units import BUG_KINDS, UNITS, Unit

HELDOUT_PAIRS = {("grade", "boundary"), ("max_gap", "empty-input"), ("discount", "constant"),
                 ("sum_first", "off-by-one"), ("is_leap", "branch")}
"""(unit, bug kind) pairs that only occur in the held-out split."""
PACKAGES = ("toolkit", "mylib", "helpers", "corelib", "pyutil")
TRAIN_SIZE, HELDOUT_SIZE, MINI_SIZE, SEED = 128, 32, 6, 0
"""Sizes and seed of the registered sets."""
LIMITS = dict(max_turns=12, max_tool_calls=16, wall_s=120.0, max_tokens=4096, test_timeout_s=30.0)


def pairs(split: str) -> list[tuple[str, str]]:
    """The (unit, bug kind) pairs of a split, in a fixed order."""
    every = [(u, b) for u, build in UNITS.items() for b in build(random.Random(0)).bugs]
    return [p for p in every if (p in HELDOUT_PAIRS) == (split == "heldout")]


def _call_of(assert_src: str) -> tuple[str, str]:
    """`assert f(x) == y` -> ("f(x)", "y"); `assert not f(x)` -> ("f(x)", "False"); `assert f(x)` -> (.., "True")."""
    test = ast.parse(assert_src).body[0].test
    if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Eq):
        return ast.unparse(test.left), ast.unparse(test.comparators[0])
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.unparse(test.operand), "False"
    return ast.unparse(test), "True"


def symptom(buggy_module: str, assert_src: str) -> str:
    """What the buggy code does on a hidden case, as an issue reporter would write it (runs our template code)."""
    call, expected = _call_of(assert_src)
    ns: dict = {}
    exec(compile(buggy_module, "<template>", "exec"), ns)  # our own generated source, never a model's
    try:
        got = f"returns {eval(call, ns)!r}"  # noqa: S307 - trusted template expression
    except Exception as e:  # noqa: BLE001 - the symptom is the exception
        got = f"raises {type(e).__name__}: {e}"
    return f"`{call}` {got}, but it should return {expected}."


MUTATIONS = ((" <= ", " < "), (" < ", " <= "), (" >= ", " > "), (" > ", " >= "), (" + 1", ""), (" - 1", ""),
             (" and ", " or "), (" or ", " and "))
"""One-place edits of a correct function that look like fixes (wrong_fix tries them in order)."""


def _holds(source: str, asserts: list[str]) -> list[bool]:
    """Which asserts hold for `source` (our own template code and its mutations, never a model's)."""
    ns: dict = {}
    try:
        exec(compile(source, "<template>", "exec"), ns)
    except Exception:  # noqa: BLE001 - a mutation that does not compile holds nothing
        return [False] * len(asserts)
    out = []
    for a in asserts:
        try:
            exec(compile(a, "<assert>", "exec"), dict(ns))
            out.append(True)
        except Exception:  # noqa: BLE001 - a failing or raising assert
            out.append(False)
    return out


def wrong_fix(unit: Unit, bug: str) -> str | None:
    """A plausible but wrong fix: one edit (MUTATIONS) of the correct function, else of the buggy one, that still
    passes the visible asserts and fails a hidden one of the bug; None when no edit qualifies."""
    for base in (unit.correct, unit.bugs[bug]):  # a near miss of the fix, then an edit beside the bug
        for old, new in MUTATIONS:
            start = base.find(old)
            while start >= 0:
                src = base[:start] + new + base[start + len(old):]
                if src not in (unit.bugs[bug], unit.correct) and all(_holds(src, unit.visible)) \
                        and not all(_holds(src, unit.hidden[bug])):
                    return src
                start = base.find(old, start + 1)
    return None


def wrong_fixes(unit: Unit, bug: str) -> list[str]:
    """Every plausible but wrong version of the function, distinct: each one-place edit (MUTATIONS) of the correct
    function, then of the buggy one, then the unit's hand-written wrong fixes (`Unit.wrong`) and its other bugs,
    each kept when it passes the visible asserts and fails a hidden one of the bug; last, the buggy function
    itself (a rewrite that leaves the bug in, which every task has)."""
    cands = []
    for base in (unit.correct, unit.bugs[bug]):
        for old, new in MUTATIONS:
            start = base.find(old)
            while start >= 0:
                cands.append(base[:start] + new + base[start + len(old):])
                start = base.find(old, start + 1)
    out = []
    for src in cands + unit.wrong + [s for b, s in unit.bugs.items() if b != bug]:
        if src not in out and src not in (unit.bugs[bug], unit.correct) and all(_holds(src, unit.visible)) \
                and not all(_holds(src, unit.hidden[bug])):
            out.append(src)
    return out + [unit.bugs[bug]]


def _module_source(units: list[Unit], bug_unit: str | None, bug: str | None) -> str:
    parts = [u.bugs[bug] if u.name == bug_unit else u.correct for u in units]
    return "\n\n".join(p.rstrip("\n") + "\n" for p in parts)


def defined_names(units: list[Unit]) -> list[str]:
    """Every top-level function the units define, in order (a unit may define more than its own name:
    to_fahrenheit comes with to_celsius, which its visible asserts call)."""
    return [n.name for u in units for n in ast.parse(u.correct).body if isinstance(n, ast.FunctionDef)]


def _test_file(pkg: str, module: str, units: list[Unit], extra: dict[str, list[str]] | None = None) -> str:
    names = ", ".join(defined_names(units))
    lines = [f"from {pkg}.{module} import {names}", ""]
    for u in units:
        lines += ["", f"def test_{u.name}():"] + [f"    {a}" for a in u.visible]
    for u in units:
        for i, a in enumerate((extra or {}).get(u.name, [])):
            lines += ["", f"def test_{u.name}_case_{i}():", f"    {a}"]
    return "\n".join(lines) + "\n"


def make_task(split: str, index: int, unit: str, bug: str, rng: random.Random) -> RepoTask:
    target = UNITS[unit](rng)
    others = [n for n in UNITS if n != unit]
    rng.shuffle(others)
    chosen, modules = [target], {target.module}
    want = rng.randint(1, 3)
    for n in others:
        if len(modules) >= want:
            break
        u = UNITS[n](rng)
        if u.module not in modules or rng.random() < 0.3:
            chosen.append(u)
            modules.add(u.module)
    pkg = rng.choice(PACKAGES)
    by_module: dict[str, list[Unit]] = {}
    for u in chosen:
        by_module.setdefault(u.module, []).append(u)
    files = {f"{pkg}/__init__.py": f'"""{pkg}: small helpers."""\n'}
    readme = [f"# {pkg}", "", "Small helper functions.", ""]
    for mod, units in sorted(by_module.items()):
        files[f"{pkg}/{mod}.py"] = _module_source(units, unit, bug)
        files[f"tests/test_{mod}.py"] = _test_file(pkg, mod, units)
        readme += [f"- `{pkg}/{mod}.py`: " + "; ".join(u.doc for u in units)]
    readme += ["", "Run the tests with `pytest tests`."]
    files["README.md"] = "\n".join(readme) + "\n"
    mod_units = by_module[target.module]
    hidden_path = f"tests/test_{target.module}_hidden.py"
    hidden = {hidden_path: _test_file(pkg, target.module, mod_units, {unit: target.hidden[bug]})}
    module_path = f"{pkg}/{target.module}.py"
    problem = (f"Bug report: {symptom(files[module_path], target.hidden[bug][0])}\n"
               f"The function is `{unit}` in `{module_path}`. Fix the code so it behaves as documented; "
               f"do not change the tests.")
    solution = {module_path: _module_source(mod_units, None, None)}
    wrong_src = wrong_fix(target, bug)
    wrong = {module_path: _module_source([replace(u, bugs={"wrong": wrong_src}) if u is target else u
                                          for u in mod_units], unit, "wrong")} if wrong_src else {}
    wrongs = [{module_path: _module_source([replace(u, bugs={"wrong": src}) if u is target else u for u in mod_units],
                                           unit, "wrong")} for src in wrong_fixes(target, bug)]
    return RepoTask(f"repo-{split}-{index:04d}-{unit}-{bug}", problem, files, hidden_tests=hidden,
                    visible_tests=sorted(p for p in files if p.startswith("tests/")),
                    limits=RepoLimits(**LIMITS),
                    metadata={"solution": solution, "wrong_fix": wrong, "wrong_fixes": wrongs, "bug": bug, "unit": unit,
                              "split": split,
                              "source": f"builtin:repo-{split}"})


def generate_repo_tasks(split: str, n: int, seed: int = SEED) -> list[RepoTask]:
    """n tasks of `split` (`train` or `heldout`), cycling through its (unit, bug) pairs in a seeded order."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be train or heldout, got {split!r}")
    rng = random.Random(f"{seed}-{split}")
    ps = pairs(split)
    order = [ps[i % len(ps)] for i in range(n)]
    rng.shuffle(order)
    return [make_task(split, i, u, b, random.Random(f"{seed}-{split}-{i}")) for i, (u, b) in enumerate(order)]


REPO_SETS: dict[str, Callable[[], list[RepoTask]]] = {
    "repo-train": lambda: generate_repo_tasks("train", TRAIN_SIZE),
    "repo-heldout": lambda: generate_repo_tasks("heldout", HELDOUT_SIZE),
    "repo-mini": lambda: generate_repo_tasks("train", MINI_SIZE),
}
"""Built-in repository sets by name (`builtin:NAME`)."""

__all__ = ["BUG_KINDS", "HELDOUT_PAIRS", "REPO_SETS", "UNITS", "generate_repo_tasks", "make_task", "pairs"]
