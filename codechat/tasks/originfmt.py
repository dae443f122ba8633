"""MBPP+ OriginFmt test scripts read as data: the inputs, expected results, tolerance and comparison rule that
evalplus baked into each record's `test`, so the record loads as an MBPP+ task (`base_input`, `plus_input`,
`atol`, expected outputs) and is judged by codechat/verifier/evalplus.py, not by running the script.

A script has one of these shapes (all 378 records of MbppPlus-OriginFmt v0.2.0):

    def assertion(out, exp, atol): ...        # np.allclose / ==; or set(out) == set(exp); or the not-None rule
    inputs = [[ARG, ...], ...]
    results = [EXPECTED, ...]                 # absent in 3 records: there the script calls its `ref_func`
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(ENTRY(*inp), exp, ATOL)     # or assertion(ENTRY(*inp), ref_func(*inp), ATOL)

Running the script itself is what the MBPP+ main files avoid: it compares with np.allclose, which broadcasts
(`[]` is close to any list of floats), its not-None rule computes a verdict and never asserts it, and it runs
every input under one time limit (tasks 271 and 392 need 50 s and 93 s in plain Python). The file does not mark
which inputs are MBPP's own (`base`); they lead the list, and `parse_cases` finds where they end from the
record's shown asserts (377 of 378 splits equal MBPP+'s `base_input`; task 223 counts one more).

Records of another shape fall back to the script as one test (`strict_script`, with the broadcast and the
unasserted verdict fixed), and the loader warns that their tests are weaker.
"""
from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass


@dataclass
class Cases:
    """One OriginFmt record's test data."""
    entry_point: str
    """The function the script calls on each input."""
    inputs: list[list]
    """Argument lists, MBPP's own first, then evalplus's extra inputs."""
    n_base: int
    """How many of `inputs` are MBPP's own (evalplus's `base`)."""
    expected: list | None
    """The expected output per input, as the file has them (sets for the set rule); None where the script
    computes them with its own copy of the reference (the reference solution gives them)."""
    atol: float
    """evalplus's tolerance for float outputs (0: exact, but 1e-6 for floats, as evalplus does)."""
    oracle: str | None
    """evalplus's special comparison: `set` (compared as sets), `not_none` (a bool, or whether the result is
    not None), or None (equal, floats within atol)."""


def _parse(src: str) -> ast.Module:
    with warnings.catch_warnings():  # MBPP code has invalid escapes like '\d' in plain strings
        warnings.simplefilter("ignore")
        return ast.parse(src)


class _Inf(ast.NodeTransformer):
    """`inf` (the script imports math's) as a float constant; other names stay, for literal_eval to refuse."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "inf":
            return ast.copy_location(ast.Constant(float("inf")), node)
        return node


def literal(node: ast.AST):
    """The value of a literal expression (Python's literal_eval, plus `inf`); ValueError if it is not one."""
    try:
        return ast.literal_eval(node)
    except ValueError:  # rare (4 of the 753 lists hold `inf`): walking every node would double the load time
        return ast.literal_eval(_Inf().visit(node))


def _oracle(fn: ast.FunctionDef) -> str | None | bool:
    """The comparison rule of the script's `assertion` helper; False for a helper of no known shape."""
    calls = {getattr(n.func, "attr", getattr(n.func, "id", None)) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    if "exact_match" in names:
        return "not_none"
    if "allclose" not in calls:
        return False
    return "set" if "set" in calls else None


def _loop_call(node: ast.AST) -> tuple[str, bool, float] | None:
    """(entry point, whether expected comes from `results`, atol) of the script's final loop, else None."""
    if not isinstance(node, ast.For) or len(node.body) != 1 or not isinstance(node.body[0], ast.Expr):
        return None
    call = node.body[0].value
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "assertion" and len(call.args) == 3):
        return None
    got, exp, atol = call.args
    if not (isinstance(got, ast.Call) and isinstance(got.func, ast.Name) and len(got.args) == 1
            and isinstance(got.args[0], ast.Starred)):
        return None
    if not (isinstance(atol, ast.Constant) and type(atol.value) in (int, float)):
        return None
    if isinstance(exp, ast.Name) and exp.id == "exp":
        return got.func.id, True, float(atol.value)
    if isinstance(exp, ast.Call) and getattr(exp.func, "id", None) == "ref_func":
        return got.func.id, False, float(atol.value)
    return None


def _n_base(inputs: list[list], shown: list[str], entry_point: str) -> int:
    """Where MBPP's own inputs end: past the last of the first few inputs that a shown assert calls with, and
    at least as many as there are shown asserts."""
    called = []
    for src in shown:
        try:
            call = next(n for n in ast.walk(_parse(src)) if isinstance(n, ast.Call)
                        and getattr(n.func, "id", None) == entry_point)
            called.append([literal(a) for a in call.args])
        except (SyntaxError, StopIteration, ValueError, TypeError):
            continue
    head = min(len(inputs), len(shown) + 2)
    last = max((i + 1 for i in range(head) if list(inputs[i]) in called), default=0)
    return min(len(inputs), max(len(shown), last))


def parse_cases(test: str, shown: list[str]) -> Cases | None:
    """The test data of an OriginFmt script, or None when the script has another shape."""
    try:
        tree = _parse(test)
    except SyntaxError:
        return None
    values = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
              and isinstance(n.targets[0], ast.Name)}
    helper = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "assertion"), None)
    loop = _loop_call(tree.body[-1]) if tree.body else None
    if helper is None or loop is None or "inputs" not in values:
        return None
    oracle = _oracle(helper)
    entry_point, baked, atol = loop
    if oracle is False or (baked and "results" not in values):
        return None
    try:
        inputs = literal(values["inputs"])
        expected = literal(values["results"]) if baked else None
        if not isinstance(inputs, list) or not all(isinstance(a, (list, tuple)) for a in inputs):
            return None
        if expected is not None and (not isinstance(expected, list) or len(expected) != len(inputs)):
            return None
        if expected is not None and oracle == "set":
            expected = [set(e) for e in expected]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    inputs = [list(a) for a in inputs]
    return Cases(entry_point, inputs, _n_base(inputs, shown, entry_point), expected, atol, oracle)


_ALLCLOSE = "assert np.allclose(out, exp, rtol=1e-07, atol=atol)"
_NO_ASSERT = "        exact_match = exp == (out is not None)\n"
_STRICT_CLOSE = '''def _codechat_allclose(out, exp, atol):
    """np.allclose without broadcasting: the same shape, then element-wise."""
    if isinstance(out, (set, frozenset)) and isinstance(exp, (set, frozenset)):
        out, exp = sorted(out), sorted(exp)
    try:
        a, b = np.asarray(out), np.asarray(exp)
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-07, atol=atol))
    except (TypeError, ValueError):
        return False


'''


def strict_script(test: str) -> str:
    """The fallback: the script itself with its `assertion` made to judge: floats compared by shape then
    element-wise (`np.allclose` broadcasts, so `[]` would pass any float list), and the not-None rule's result
    asserted (the file computes it and never asserts it)."""
    if _ALLCLOSE in test:
        test = test.replace(_ALLCLOSE, "assert _codechat_allclose(out, exp, atol)")
        return test.replace("def assertion(out, exp, atol):", _STRICT_CLOSE + "def assertion(out, exp, atol):", 1)
    if _NO_ASSERT in test:
        return test.replace(_NO_ASSERT, _NO_ASSERT + "    assert exact_match\n", 1)
    return test
