"""The building blocks of the generated repository family: one function per unit, its correct source, a buggy
source per bug kind it supports, visible test asserts (true for the correct and every buggy version) and the
hidden asserts that catch each bug. `tests/test_repo_tasks.py` checks those three facts for every unit. Every
unit whose (unit, bug) pair is held out (repo_family.HELDOUT_PAIRS) has a second bug kind that is trained on, so
its correct source is a fix the expert writes in train: a held-out task asks for a known function with a bug of a
kind never seen in that function.

A unit is built from a seeded `random.Random` (thresholds, constants, separators vary), so the same unit looks
different across tasks while its bug stays the same kind.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

BUG_KINDS = ("boundary", "empty-input", "constant", "off-by-one", "branch")


@dataclass
class Unit:
    name: str
    """Unit name (the function name)."""
    module: str
    """Module file stem it lives in."""
    correct: str
    """Source of the correct function."""
    bugs: dict[str, str]
    """Bug kind -> source of the buggy function."""
    visible: list[str]
    """Assert statements that hold for the correct and for every buggy version."""
    hidden: dict[str, list[str]]
    """Bug kind -> assert statements that fail on that buggy version and hold for the correct one."""
    doc: str
    """One line for the README."""
    wrong: list[str] = field(default_factory=list)
    """Plausible but wrong fixes written by hand (repo_family.wrong_fixes keeps those that pass the visible asserts
    and fail a hidden one of the task's bug)."""


def _count_in_range(r: random.Random) -> Unit:
    lo, hi = r.randint(0, 5), r.randint(10, 20)
    body = "    return sum(1 for x in xs if lo {a} x {b} hi)\n"
    head = 'def count_in_range(xs, lo, hi):\n    """How many x in xs satisfy lo <= x <= hi (both ends included)."""\n'
    return Unit("count_in_range", "stats", head + body.format(a="<=", b="<="),
                {"boundary": head + body.format(a="<=", b="<")},
                [f"assert count_in_range([{lo + 1}, {hi - 1}, {hi + 5}], {lo}, {hi}) == 2",
                 f"assert count_in_range([], {lo}, {hi}) == 0"],
                {"boundary": [f"assert count_in_range([{lo}, {hi}, {hi + 1}], {lo}, {hi}) == 2"]},
                "count_in_range(xs, lo, hi): values in the closed interval [lo, hi]")


def _grade(r: random.Random) -> Unit:
    a, b = r.choice([90, 85]), r.choice([75, 70])
    head = 'def grade(score):\n    """Letter grade: A from {a}, B from {b}, else C."""\n'.format(a=a, b=b)
    correct = head + f"    if score >= {a}:\n        return 'A'\n    if score >= {b}:\n        return 'B'\n    return 'C'\n"
    return Unit("grade", "grades", correct, {
        "boundary": head + f"    if score > {a}:\n        return 'A'\n    if score >= {b}:\n        return 'B'\n    return 'C'\n",
        "branch": head + f"    if score >= {b}:\n        return 'B'\n    if score >= {a}:\n        return 'A'\n    return 'C'\n"},
        [f"assert grade({b + 2}) == 'B'", f"assert grade({b - 10}) == 'C'"],
        {"boundary": [f"assert grade({a}) == 'A'"], "branch": [f"assert grade({a + 5}) == 'A'"]},
        "grade(score): letter grade A/B/C")


def _parse_pairs(r: random.Random) -> Unit:
    sep = r.choice([";", ",", "&"])
    head = f'def parse_pairs(text):\n    """Parse "key=value" items separated by {sep!r} into a dict; "" gives {{}}."""\n'
    loop = (f"    out = {{}}\n    for item in text.split({sep!r}):\n        key, value = item.split('=', 1)\n"
            f"        out[key.strip()] = value.strip()\n    return out\n")
    return Unit("parse_pairs", "parser", head + "    if not text.strip():\n        return {}\n" + loop,
                {"empty-input": head + loop},
                [f"assert parse_pairs('a=1{sep}b = 2') == {{'a': '1', 'b': '2'}}", "assert parse_pairs('k=v=w') == {'k': 'v=w'}"],
                {"empty-input": ["assert parse_pairs('') == {}", "assert parse_pairs('  ') == {}"]},
                "parse_pairs(text): key=value items into a dict",
                wrong=[head + "    if not text:\n        return {}\n" + loop])


def _average(r: random.Random) -> Unit:
    v = r.randint(1, 9)
    head = 'def average(xs):\n    """Arithmetic mean of xs; 0.0 for an empty list."""\n'
    return Unit("average", "stats", head + "    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)\n",
                {"empty-input": head + "    return sum(xs) / len(xs)\n"},
                [f"assert average([{v}]) == {v}", "assert average([2, 4]) == 3"],
                {"empty-input": ["assert average([]) == 0.0"]}, "average(xs): the mean, 0.0 when empty",
                wrong=[head + "    if not xs:\n        return None\n    return sum(xs) / len(xs)\n"])


def _last_word(r: random.Random) -> Unit:
    head = 'def last_word(s):\n    """The last whitespace-separated word of s; "" when s has none."""\n'
    return Unit("last_word", "text", head + "    words = s.split()\n    return words[-1] if words else ''\n",
                {"empty-input": head + "    return s.split()[-1]\n"},
                ["assert last_word('hello big world') == 'world'", "assert last_word(' x ') == 'x'"],
                {"empty-input": ["assert last_word('') == ''", "assert last_word('   ') == ''"]},
                "last_word(s): the last word", wrong=[head + "    return s.split()[-1] if s else ''\n"])


def _max_gap(r: random.Random) -> Unit:
    head = 'def max_gap(xs):\n    """Largest absolute difference between neighbours; 0 with fewer than two items."""\n'
    body = "    return max(abs(b - a) for a, b in zip(xs, xs[1:]))\n"
    guard = "    if len(xs) < 2:\n        return 0\n"
    return Unit("max_gap", "series", head + guard + body,
                {"empty-input": head + body, "branch": head + guard + body.replace("abs(b - a)", "b - a")},
                ["assert max_gap([1, 4, 2]) == 3", f"assert max_gap([0, {r.randint(5, 9)}]) > 4"],
                {"empty-input": ["assert max_gap([]) == 0", "assert max_gap([7]) == 0"],
                 "branch": ["assert max_gap([5, 1]) == 4", "assert max_gap([9, 2, 3]) == 7"]},
                "max_gap(xs): largest step between neighbours",
                wrong=[head + "    if not xs:\n        return 0\n" + body,
                       head + guard + body.replace("abs(b - a)", "abs(b) - abs(a)")])


def _moving_sums(r: random.Random) -> Unit:
    head = 'def moving_sums(xs, k):\n    """Sums of every window of k consecutive items, in order."""\n'
    body = "    return [sum(xs[i:i + k]) for i in range(len(xs) - k{d})]\n"
    return Unit("moving_sums", "series", head + body.format(d=" + 1"), {"off-by-one": head + body.format(d="")},
                ["assert moving_sums([], 2) == []", "assert moving_sums([1], 3) == []"],
                {"off-by-one": ["assert moving_sums([1, 2, 3], 2) == [3, 5]", "assert moving_sums([4], 1) == [4]"]},
                "moving_sums(xs, k): window sums", wrong=[head + body.format(d=" + 2")])


def _sum_first(r: random.Random) -> Unit:
    head = 'def sum_first(xs, n):\n    """Sum of the first n items of xs (all of them if xs is shorter)."""\n'
    body = "    total = 0\n    for i in range(min(n, len(xs)){d}):\n        total += xs[i]\n    return total\n"
    return Unit("sum_first", "series", head + body.format(d=""),
                {"off-by-one": head + body.format(d=" - 1"),
                 "boundary": head + body.format(d="").replace("len(xs))", "len(xs) - 1)")},
                ["assert sum_first([], 3) == 0", "assert sum_first([5, 6], 0) == 0"],
                {"off-by-one": ["assert sum_first([1, 2, 3], 2) == 3", "assert sum_first([4], 5) == 4"],
                 "boundary": ["assert sum_first([4], 5) == 4", "assert sum_first([1, 2], 9) == 3"]},
                "sum_first(xs, n): sum of a prefix")


def _to_fahrenheit(r: random.Random) -> Unit:
    wrong = r.choice(["30", "31", "33"])
    head = 'def to_fahrenheit(c):\n    """Degrees Celsius to Fahrenheit."""\n'
    other = '\n\ndef to_celsius(f):\n    """Degrees Fahrenheit to Celsius."""\n    return (f - 32) * 5 / 9\n'
    return Unit("to_fahrenheit", "convert", head + "    return c * 9 / 5 + 32\n" + other,
                {"constant": head + f"    return c * 9 / 5 + {wrong}\n" + other},
                ["assert to_celsius(212) == 100", "assert to_celsius(32) == 0"],
                {"constant": ["assert to_fahrenheit(100) == 212", "assert to_fahrenheit(0) == 32"]},
                "to_fahrenheit(c), to_celsius(f): temperature conversions",
                wrong=[head + "    return c * 5 / 9 + 32\n" + other])


def _discount(r: random.Random) -> Unit:
    head = 'def discount(price, percent):\n    """The price after taking off `percent` percent."""\n'
    return Unit("discount", "pricing", head + "    return price * (1 - percent / 100)\n",
                {"constant": head + "    return price * (1 - percent / 10)\n",
                 "branch": head + "    return price * (1 + percent / 100)\n"},
                [f"assert discount({r.randint(2, 9) * 10}, 0) > 0", "assert discount(50, 0) == 50"],
                {"constant": ["assert discount(200, 25) == 150", "assert discount(80, 50) == 40"],
                 "branch": ["assert discount(200, 25) == 150", "assert discount(80, 50) == 40"]},
                "discount(price, percent): price after a percentage off")


def _clamp(r: random.Random) -> Unit:
    head = 'def clamp(x, lo, hi):\n    """x limited to the interval [lo, hi]."""\n'
    body = "    if x < lo:\n        return {low}\n    if x > hi:\n        return hi\n    return x\n"
    return Unit("clamp", "bounds", head + body.format(low="lo"), {"branch": head + body.format(low="hi")},
                ["assert clamp(5, 0, 10) == 5", "assert clamp(15, 0, 10) == 10"],
                {"branch": ["assert clamp(-5, 0, 10) == 0", "assert clamp(1, 2, 3) == 2"]},
                "clamp(x, lo, hi): limit to an interval")


def _is_leap(r: random.Random) -> Unit:
    head = 'def is_leap(year):\n    """Gregorian leap year."""\n'
    correct = head + "    if year % 400 == 0:\n        return True\n    if year % 100 == 0:\n        return False\n    return year % 4 == 0\n"
    buggy = head + "    if year % 100 == 0:\n        return True\n    if year % 400 == 0:\n        return False\n    return year % 4 == 0\n"
    return Unit("is_leap", "dates", correct, {"branch": buggy, "constant": correct.replace("% 400", "% 40")},
                ["assert is_leap(2024)", "assert not is_leap(2023)", "assert is_leap(2000)"],
                {"branch": ["assert not is_leap(1900)", "assert not is_leap(2100)"],
                 "constant": ["assert not is_leap(2200)", "assert not is_leap(1800)"]},
                "is_leap(year): leap years")


UNITS = {f.__name__[1:]: f for f in (_count_in_range, _grade, _parse_pairs, _average, _last_word, _max_gap,
                                     _moving_sums, _sum_first, _to_fahrenheit, _discount, _clamp, _is_leap)}
"""Unit name -> builder (seeded random.Random -> Unit)."""
