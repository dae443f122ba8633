"""The comparison worker: a separate process that parses answers with math-verify (LaTeX -> SymPy) and compares them.

Run by answer_equiv.EquivPool as `python answer_worker.py MEMORY_MB`; self-contained (imports no codechat), so it
starts in about a second. Protocol, one JSON object per line: the worker first prints {"ready": true}; then for
each request line {"pairs": [[reference, answer], ...]} it prints {"equal": true|false} (true when any pair is
equivalent) or {"error": "Type: message"}.

Protects against: a comparison that hangs (SymPy simplification can run for ever: the parent kills this process
at its deadline), one that eats memory (RLIMIT_AS), and evaluating model text as Python: only math-verify's LaTeX
extraction is used (its `ExprExtractionConfig` would call sympy's `parse_expr`, which runs `eval`), and SymPy's
`eval_expr` is replaced by one that only builds number literals (`Integer (12 )`) and refuses anything
else, so no code path here can evaluate a string.
Does not protect against: bugs in the ANTLR LaTeX parser or SymPy beyond hangs, memory and crashes (a crash is
an `error` verdict), nor against answers the library judges wrongly.
"""
from __future__ import annotations

import json
import logging
import os
import re
import resource
import sys


_NUMERIC_CODE = re.compile(r"Integer \((\d{1,4000}) \)|Float \('(\d{0,4000}\.?\d{0,4000}(?:[eE][+-]?\d{1,6})?)' \)"
                           r"|Symbol \('([A-Za-z_][A-Za-z0-9_]{0,64})' \)")


def _numbers_only(code: str, local_dict, global_dict):
    """Stands in for sympy's `eval_expr`: builds the number or symbol that `Integer (12 )`, `Float ('1.5' )` or
    `Symbol ('yotta' )` names (the only code the LaTeX parser and SymPy's unit tables make it evaluate) and
    refuses anything else."""
    import sympy  # heavy: imported only in the worker

    m = _NUMERIC_CODE.fullmatch(code)
    if m is None:
        raise RuntimeError("evaluating text is disabled in the answer worker")
    if m.group(1) is not None:
        return sympy.Integer(int(m.group(1)))
    return sympy.Float(m.group(2)) if m.group(2) is not None else sympy.Symbol(m.group(3))


WARM_UP = [["x^2+2x+1", "(x+1)^2"], ["\\{1,2\\}", "\\{2, 1\\}"], ["[0,1)", "(0, 1]"], ["\\frac{\\sqrt{2}}{2}", "x=2"],
           ["10 \\text{ cm}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"], ["2\\pi", "3.14"]]
"""Comparisons run once at start, covering the grammar's main forms."""


def _no_parse(*args, **kwargs):
    raise RuntimeError("parse_expr is disabled in the answer worker")


def disable_eval() -> None:
    """Make every SymPy string-evaluation path (sympify(str), parse_expr) unable to run code: only number
    literals are built, without `eval`."""
    import sympy.parsing.sympy_parser as sp  # heavy: imported only in the worker
    import sympy.physics.units  # noqa: F401 - math-verify imports it lazily; its tables sympify names

    sp.eval_expr = _numbers_only
    try:
        import math_verify.parser as mp  # heavy optional dependency (math-verify), imported only in the worker
        mp.parse_expr = _no_parse
    except ImportError:
        pass


def exact_decimals(gold: list, pred: list) -> list:
    """`pred` with its decimals read as exact rationals when `gold` holds no decimal (strict numbers): math-verify
    would otherwise round both to 6 places, so `1.41421356` would equal `\\sqrt{2}`."""
    import sympy  # heavy: imported only in the worker

    def has_float(x) -> bool:
        return isinstance(x, sympy.Basic) and bool(x.atoms(sympy.Float))
    if any(has_float(g) for g in gold):
        return pred
    out = []
    for p in pred:
        if has_float(p):
            p = p.xreplace({f: sympy.Rational(str(f)) for f in p.atoms(sympy.Float)})
        out.append(p)
    return out


def make_compare(strict: bool = True):
    """-> compare(pairs) -> bool, with math-verify imported and eval disabled."""
    from math_verify import LatexExtractionConfig, parse, verify  # heavy optional dependency (math-verify)

    disable_eval()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    cache: dict[str, list] = {}

    def parsed(s: str) -> list:
        if s not in cache:
            if len(cache) > 4096:
                cache.clear()
            cache[s] = parse("\\boxed{" + s + "}", config, parsing_timeout=None) or [s]
        return cache[s]

    def compare(pairs: list[list[str]]) -> bool:
        for ref, ans in pairs:
            gold, pred = parsed(ref), parsed(ans)
            if strict:
                pred = exact_decimals(gold, pred)
            if verify(gold, pred, timeout_seconds=None):
                return True
        return False

    return compare


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))  # run as a script: its folder must not shadow any import
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    memory_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if memory_mb > 0:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    compare = make_compare(strict=(sys.argv[2] if len(sys.argv) > 2 else "strict") == "strict")
    for pair in WARM_UP:  # fills the ANTLR parser's caches (a form's first parse costs ~0.5 s) before timing starts
        compare([pair])
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            pairs = [[str(r), str(a)] for r, a in req["pairs"]]
            reply = {"equal": bool(compare(pairs))}
        except Exception as e:  # noqa: BLE001 - any failure of the library is this comparison's error
            reply = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
