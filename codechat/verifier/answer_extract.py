"""Find the final answer in a completion, clean it, and read plain numbers exactly: the string side of answer checks.

Grammar of what is extracted (each extractor returns the last match in the text, or None):
    boxed        `\\boxed{...}` or `\\fbox{...}`, braces balanced (nested braces allowed), at most
                 `max_chars` long; `\\boxed 5` (no braces) takes the next token
    hashes       a line `#### ANSWER` (GSM8K's convention): the rest of that line
    answer-is    "the (final) answer is X" or "answer: X": X up to the end of the line or a full stop
    bare         the whole completion, when it is one line with no prose (no run of 4+ letters outside LaTeX
                 commands and \\text{}): a completion that is just `\\frac{1}{2}` or `x = 2`
    last-number  the last integer, decimal or a/b fraction in the text (a fallback: it can pick an intermediate)
Only the last `MAX_SCAN` characters are scanned and every pattern is linear, so arbitrary text cannot make the
extractor slow (fuzzed in tests/test_answer_fuzz.py).

`plain_number` reads integers, decimals, `1,000`-style thousands, scientific notation, `a/b`, `\\frac{a}{b}` and
a trailing percent sign into an exact `Fraction`; anything else goes to the symbolic comparison (answer_equiv.py).
Nothing here evaluates text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from codechat.tasks.answer import extract_boxed

EXTRACTORS = ("boxed", "hashes", "answer-is", "bare", "last-number")
MAX_SCAN = 65536
"""Only this many trailing characters of a completion are searched for its answer."""

_HASHES = re.compile(r"^[ \t]*####[ \t]*([^\n]*)$", re.M)
_ANSWER_IS = re.compile(r"\banswer\s*(?:is\b|:|=)\s*:?\s*", re.I)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_SENTENCE_END = re.compile(r"\.(?:\s|$)")

_INT = r"\d{1,3}(?:,\d{3})+|\d+"
_PLAIN = re.compile(rf"([+-])?\s*(?:({_INT})(\.\d*)?|(\.\d+))(?:[eE]([+-]?\d{{1,4}}))?")
_FRAC = re.compile(r"([+-])?\s*(?:\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))|(\d+)\s*/\s*(\d+))")
_PERCENT = re.compile(r"\s*(?:\\%|%|\\percent)\s*$")
_WRAPPERS = [(re.compile(r"^\$+(.*?)\$+$", re.S), 1), (re.compile(r"^\\\((.*)\\\)$", re.S), 1),
             (re.compile(r"^\\\[(.*)\\\]$", re.S), 1), (re.compile(r"^\\(?:boxed|fbox)\{(.*)\}$", re.S), 1),
             (re.compile(r"^\*\*(.*)\*\*$", re.S), 1)]
_NOISE = re.compile(r"(?<!\\)\\[,;:! ]|\\left|\\right|\\displaystyle|~")


def _hashes(text: str, max_chars: int) -> str | None:
    found = None
    for m in _HASHES.finditer(text):
        found = m.group(1)
    return found[:max_chars + 1] if found is not None and found.strip() else None


def _answer_is(text: str, max_chars: int) -> str | None:
    last = None
    for m in _ANSWER_IS.finditer(text):
        last = m
    if last is None:
        return None
    found = text[last.end():last.end() + 4 * max_chars].split("\n", 1)[0]
    end = _SENTENCE_END.search(found)
    found = (found[:end.start()] if end else found).strip().rstrip(".")
    return found[:max_chars + 1] or None


_COMMAND = re.compile(r"\\(?:begin|end)\{[A-Za-z*]*\}|\\(?:text|mathrm|mbox)\{[^{}]*\}|\\[A-Za-z]+")
_PROSE = re.compile(r"[A-Za-z]{4,}")


def _bare(text: str, max_chars: int) -> str | None:
    s = text.strip()
    if not s or "\n" in s or len(s) > max_chars or _PROSE.search(_COMMAND.sub(" ", s)):
        return None
    return s


def _last_number(text: str, max_chars: int) -> str | None:
    found = None
    for m in _NUMBER.finditer(text):
        found = m.group()
    return found


_FUNCS = {"boxed": extract_boxed, "hashes": _hashes, "answer-is": _answer_is, "bare": _bare,
          "last-number": _last_number}


@dataclass(frozen=True)
class Extracted:
    """A final answer found in a completion."""
    text: str
    """The answer as written (cleaned by `clean`)."""
    how: str
    """Which extractor found it (one of EXTRACTORS)."""


def extract_answer(completion: str, extractors=EXTRACTORS, max_chars: int = 512) -> Extracted | None:
    """The completion's final answer by the first extractor in `extractors` that finds one, else None."""
    text = completion[-MAX_SCAN:] if completion else ""
    for name in extractors:
        found = _FUNCS[name](text, max_chars + 1)  # + 1: an over-long answer is found, then refused
        if found is not None:
            found = clean(found)
            if found:
                return Extracted(found, name)
    return None


_UNICODE = {"°": "^\\circ", "½": "\\frac{1}{2}", "⅓": "\\frac{1}{3}", "⅔": "\\frac{2}{3}", "¼": "\\frac{1}{4}",
            "¾": "\\frac{3}{4}", "⅕": "\\frac{1}{5}", "⅙": "\\frac{1}{6}", "⅛": "\\frac{1}{8}", "π": "\\pi ",
            "√": "\\sqrt ", "∞": "\\infty ", "−": "-", "×": "\\times ", "·": "\\cdot ", "≤": "\\le ", "≥": "\\ge ",
            "≠": "\\ne "}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))
_NUM = r"-?\d+(?:\.\d+)?"
_LESS = {"<": False, "\\lt": False, "\\le": True, "\\leq": True, "\\leqslant": True}
_MORE = {">": False, "\\gt": False, "\\ge": True, "\\geq": True, "\\geqslant": True}
_OP = "|".join(re.escape(o) for o in sorted([*_LESS, *_MORE], key=len, reverse=True))
_ONE_SIDED = re.compile(rf"([a-zA-Z])\s*({_OP})\s*({_NUM})")
_TWO_SIDED = re.compile(rf"({_NUM})\s*({_OP})\s*([a-zA-Z])\s*({_OP})\s*({_NUM})")


def as_interval(s: str) -> str:
    """`x < 3` -> `(-\\infty, 3)`, `1 \\le x < 2` -> `[1, 2)`: a one-variable inequality as the interval it means,
    the form references use. Other text unchanged."""
    m = _ONE_SIDED.fullmatch(s)
    if m:
        _, op, c = m.groups()
        if op in _LESS:
            return f"(-\\infty, {c}{']' if _LESS[op] else ')'}"
        return f"{'[' if _MORE[op] else '('}{c}, \\infty)"
    m = _TWO_SIDED.fullmatch(s)
    if m and m.group(2) in _LESS and m.group(4) in _LESS:
        a, op1, _, op2, b = m.groups()
        return f"{'[' if _LESS[op1] else '('}{a}, {b}{']' if _LESS[op2] else ')'}"
    return s


def clean(ans: str) -> str:
    """Strip what never changes an answer's value: $...$, \\(...\\), \\boxed{} around it, bold, \\left/\\right,
    thin spaces, a trailing full stop; read Unicode math (`90°`, `½`, `π`) as LaTeX and a one-variable
    inequality as its interval."""
    s = ans.strip()
    for _ in range(4):
        before = s
        for pat, g in _WRAPPERS:
            m = pat.match(s)
            if m:
                s = m.group(g).strip()
        s = s.rstrip(".").strip()
        if s == before:
            break
    s = _NOISE.sub("", s).strip()
    return as_interval(_UNICODE_RE.sub(lambda m: _UNICODE[m.group()], s).strip())


def has_percent(s: str) -> bool:
    return _PERCENT.search(s) is not None


def strip_percent(s: str) -> str:
    return _PERCENT.sub("", s)


def plain_number(s: str) -> tuple[Fraction, bool] | None:
    """(exact value, written as a decimal) for a plain number, else None. A trailing % is not read here:
    callers remove it (strip_percent) and apply their percent rule."""
    s = s.strip().replace("\\$", "").replace("$", "").strip()
    m = _PLAIN.fullmatch(s)
    if m:
        sign, whole, frac_part, only_frac, exp = m.groups()
        digits = (whole or "0").replace(",", "") + (frac_part or only_frac or "")
        if digits.endswith("."):
            digits = digits[:-1]
        value = Fraction(digits)
        if exp:
            value *= Fraction(10) ** int(exp)
        return (-value if sign == "-" else value), bool((frac_part or "").strip(".") or only_frac or exp)
    m = _FRAC.fullmatch(s)
    if m:
        sign, n1, n2, d1, d2, n3, d3 = m.groups()
        num, den = int(n1 or n2 or n3), int(d1 or d2 or d3)
        if den == 0:
            return None
        value = Fraction(num, den)
        return (-value if sign == "-" else value), False
    return None
