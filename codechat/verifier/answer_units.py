"""Units written after a math answer's number: `440\\text{ m}^2` is not `440\\text{ cm}^2`.

The symbolic comparison drops `\\text{...}`, so without this rule any unit passes for any other. Here a side's
unit is the text of its `\\text`/`\\mbox`/`\\mathrm`/`\\textrm` groups plus an exponent after them (`^2`,
`^{3}`, or `square`/`cubic` words), read through `UNITS` into a canonical (unit, power). Two answers whose units
are both known and differ are different; an answer with no unit, or one this table does not know (`\\text{
apples}`, `\\text{ sq units}`), is left to the other rules, as before (a reference of `440` still takes
`440\\text{ m}^2`, and the reverse).
"""
from __future__ import annotations

import re

_GROUP = re.compile(r"\\(?:text|mbox|mathrm|textrm|textnormal|operatorname)\s*\{([^{}]*)\}(\s*\^\s*\{?\s*(\d)\s*\}?)?")

UNITS = {
    "mm": ("mm", "millimeter", "millimetre"), "cm": ("cm", "centimeter", "centimetre"),
    "m": ("m", "meter", "metre"), "km": ("km", "kilometer", "kilometre"),
    "in": ("in", "inch", "inche"), "ft": ("ft", "foot", "feet"), "yd": ("yd", "yard"), "mi": ("mi", "mile"),
    "mg": ("mg", "milligram"), "g": ("g", "gram"), "kg": ("kg", "kilogram"), "lb": ("lb", "lbs", "pound"),
    "oz": ("oz", "ounce"), "ml": ("ml", "milliliter", "millilitre"), "l": ("l", "liter", "litre"),
    "s": ("s", "sec", "second"), "min": ("min", "minute"), "h": ("h", "hr", "hour"), "day": ("day",),
    "week": ("week",), "month": ("month",), "year": ("yr", "year"), "dollar": ("dollar", "usd"),
    "cent": ("cent", "\\cent", "¢"), "degree": ("degree", "deg", "\\circ", "°"), "radian": ("radian", "rad"),
}
"""Canonical unit -> the words that write it (singular; a trailing `s` is dropped before lookup)."""
_LOOKUP = {word: unit for unit, words in UNITS.items() for word in words}
_POWER_WORDS = {"square": 2, "sq": 2, "cubic": 3, "cu": 3}


def unit_of(answer: str) -> tuple[str, int] | None | bool:
    """(canonical unit, power) of `answer`; None when it writes no unit; False when it writes one this table
    does not know (then no rule here applies)."""
    groups = _GROUP.findall(answer)
    if not groups:
        return None
    words = " ".join(text for text, _, _ in groups).replace("\\,", " ").replace("~", " ").lower().split()
    power = int(groups[-1][2]) if groups[-1][2] else 1
    words = [w.strip(".") for w in words if w.strip(".")]
    if words and words[0] in _POWER_WORDS:
        power, words = _POWER_WORDS[words[0]], words[1:]
    if len(words) != 1:
        return False
    word = words[0]
    m = re.fullmatch(r"([a-z°¢\\]+)\^?(\d)?", word)
    if not m:
        return False
    word, exp = m.group(1), m.group(2)
    unit = _LOOKUP.get(word) or (_LOOKUP.get(word[:-1]) if word.endswith("s") and len(word) > 2 else None)
    if unit is None:
        return False
    return unit, int(exp) if exp else power


def units_differ(reference: str, answer: str) -> bool:
    """Both sides write a unit this table knows, and they are not the same unit to the same power."""
    a, b = unit_of(reference), unit_of(answer)
    return bool(a) and bool(b) and a != b
