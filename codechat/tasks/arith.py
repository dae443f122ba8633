"""`builtin:arith-train` / `builtin:arith-heldout`: generated arithmetic and algebra answer tasks with exact answers,
so answer checking, math RL and a mixed code + math run work without downloads.

Seven templates: integer arithmetic, fraction arithmetic (answer in lowest terms, `\\frac{a}{b}`), percent of a
number, a linear equation, a two-step word problem, expanding (x+a)(x+b) (a symbolic answer), and the roots of a
monic quadratic (a set). Every answer is computed with exact integers/Fractions, never parsed from text; each task
has a worked `solution` ending in `\\boxed{...}` (for SFT) and, where natural, `accepted` alternative forms.
Splits: a prompt is held out when a fixed hash of its text says so (1 in 5), for every seed, so train and heldout
never share a problem.

The `easy` level (`builtin:arith-easy-*`) is what a model of a few million parameters learns in minutes: place
value (`400 + 70 + 3`), multiplying by ten, the number after `n`, the largest or smallest of four digits. Each
answer is built from digits of the question by one rule (copy, append a zero, add one, compare),
so a held-out problem (new numbers) is solved by the rule, not recalled; the standard level needs multi-digit
products, fractions and algebra, which a model that small does not learn on 2 CPU cores.

    from codechat.tasks.arith import generate
    tasks = generate("train", 1000, seed=0)          # = load_tasks("builtin:arith-train")
    easy = generate("heldout", 200, level="easy")   # = load_tasks("builtin:arith-easy-heldout")
"""
from __future__ import annotations

import hashlib
import math
import random
from fractions import Fraction
from typing import Callable

from codechat.tasks.answer import ANSWER_INSTRUCTION, answer_task
from codechat.tasks.model import Task

SPLITS = ("train", "heldout")
TRAIN_SIZE, HELDOUT_SIZE, SEED = 1000, 200, 0
"""Sizes and seed of the registered sets."""
EASY_TRAIN_SIZE = 2000
"""Size of `builtin:arith-easy-train` (its held-out set has HELDOUT_SIZE)."""

Problem = tuple[str, str, list[str], str]  # (question, answer, accepted alternatives, worked solution)


def _frac(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _signed(k: int) -> str:
    return f"+ {k}" if k >= 0 else f"- {-k}"


def _integer(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = rng.choice("+-*")
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    sym = {"+": "+", "-": "-", "*": "\\times"}[op]
    return f"What is ${a} {sym} {b}$?", str(value), [], f"${a} {sym} {b} = {value}$."


def _fractions(rng: random.Random) -> Problem:
    (a, b), (c, d) = [(rng.randint(1, 9), rng.randint(2, 9)) for _ in range(2)]
    op = rng.choice("+-")
    value = Fraction(a, b) + Fraction(c, d) if op == "+" else Fraction(a, b) - Fraction(c, d)
    q = f"Compute $\\frac{{{a}}}{{{b}}} {op} \\frac{{{c}}}{{{d}}}$. Express the answer as a fraction in lowest terms."
    alt = [f"{value.numerator}/{value.denominator}"] if value.denominator != 1 else []
    return q, _frac(value), alt, f"Over the common denominator {math.lcm(b, d)}, the result is ${_frac(value)}$."


def _percent(rng: random.Random) -> Problem:
    p, n = rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 60, 75]), rng.randint(1, 40) * 4
    value = Fraction(p * n, 100)
    return (f"What is ${p}\\%$ of ${n}$?", _frac(value), [],
            f"${p}\\%$ of ${n}$ is $\\frac{{{p}}}{{100}} \\cdot {n} = {_frac(value)}$.")


def _linear(rng: random.Random) -> Problem:
    a, x, b = rng.randint(2, 9), rng.randint(-12, 12), rng.randint(-20, 20)
    c = a * x + b
    return (f"Solve for $x$: ${a}x {_signed(b)} = {c}$.", str(x), [f"x={x}"],
            f"Subtract: ${a}x = {c - b}$, so $x = {x}$.")


def _word(rng: random.Random) -> Problem:
    name = rng.choice(["Ann", "Ben", "Chloe", "Dev", "Eva", "Femi"])
    thing = rng.choice(["apples", "stamps", "marbles", "books", "coins"])
    have, buy, give = rng.randint(5, 60), rng.randint(2, 30), rng.randint(1, 20)
    value = have + buy - give
    return (f"{name} has {have} {thing}, gets {buy} more, then gives away {give}. How many {thing} does "
            f"{name} have now?", str(value), [], f"${have} + {buy} - {give} = {value}$.")


def _expand(rng: random.Random) -> Problem:
    a, b = rng.choice([k for k in range(-9, 10) if k]), rng.choice([k for k in range(-9, 10) if k])
    s, p = a + b, a * b
    lin = "" if s == 0 else (f" {_signed(s)}x" if abs(s) != 1 else (" + x" if s > 0 else " - x"))
    answer = f"x^2{lin} {_signed(p)}"
    return (f"Expand $(x {_signed(a)})(x {_signed(b)})$.", answer, [],
            f"$(x {_signed(a)})(x {_signed(b)}) = x^2 + ({a} + {b})x + ({a})({b}) = {answer}$.")


def _roots(rng: random.Random) -> Problem:
    r1, r2 = rng.sample(range(-9, 10), 2)
    s, p = -(r1 + r2), r1 * r2
    lin = "" if s == 0 else (f" {_signed(s)}x" if abs(s) != 1 else (" + x" if s > 0 else " - x"))
    lo, hi = sorted((r1, r2))
    return (f"Find all real solutions of $x^2{lin} {_signed(p)} = 0$. List them separated by commas.",
            f"{lo}, {hi}", [f"\\{{{lo}, {hi}\\}}"],
            f"It factors as $(x {_signed(-r1)})(x {_signed(-r2)}) = 0$, so $x = {lo}$ or $x = {hi}$: ${lo}, {hi}$.")


TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "integer": _integer, "fractions": _fractions, "percent": _percent, "linear": _linear, "word": _word,
    "expand": _expand, "roots": _roots}


def _place(rng: random.Random) -> Problem:
    h, t, u = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
    value = 100 * h + 10 * t + u
    return (f"What is ${100 * h} + {10 * t} + {u}$?", str(value), [],
            f"{h} hundreds, {t} tens and {u} ones make {value}.")


def _times_ten(rng: random.Random) -> Problem:
    n = rng.randint(10, 999)
    return f"What is ${n} \\times 10$?", str(10 * n), [], f"Multiplying {n} by 10 appends a zero: {10 * n}."


def _next(rng: random.Random) -> Problem:
    n = rng.randint(10, 998)
    return f"What number comes right after {n}?", str(n + 1), [], f"Adding 1 to {n} gives {n + 1}."


def _extreme(which: str) -> Callable[[random.Random], Problem]:
    def make(rng: random.Random) -> Problem:
        ds = rng.sample(range(1, 10), 4)
        value = max(ds) if which == "largest" else min(ds)
        listed = f"{ds[0]}, {ds[1]}, {ds[2]} and {ds[3]}"
        return f"What is the {which} of {listed}?", str(value), [], f"Of {listed}, the {which} is {value}."
    return make


EASY_TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "place": _place, "times-ten": _times_ten, "next": _next, "largest": _extreme("largest"),
    "smallest": _extreme("smallest")}
LEVELS = {"standard": TEMPLATES, "easy": EASY_TEMPLATES}
"""Template sets by difficulty: `standard` (builtin:arith-*), `easy` (builtin:arith-easy-*)."""


def split_of(question: str) -> str:
    """`heldout` for 1 in 5 questions by a fixed hash of the text, else `train` (the same for every seed)."""
    return "heldout" if hashlib.sha256(question.encode()).digest()[0] % 5 == 0 else "train"


def generate(split: str, n: int, seed: int = SEED, level: str = "standard") -> list[Task]:
    """`n` distinct tasks of `split` at `level`, cycling through its templates; deterministic in the arguments."""
    if split not in SPLITS:
        raise ValueError(f"unknown split '{split}' (valid: {', '.join(SPLITS)})")
    if level not in LEVELS:
        raise ValueError(f"unknown level '{level}' (valid: {', '.join(LEVELS)})")
    templates, prefix = LEVELS[level], "arith" if level == "standard" else f"arith-{level}"
    rng, names, seen, tasks = random.Random(seed), list(templates), set(), []
    attempts = 0
    while len(tasks) < n and attempts < 200 * n + 1000:
        attempts += 1
        name = names[len(tasks) % len(names)]
        question, answer, accepted, worked = templates[name](rng)
        if question in seen or split_of(question) != split:
            continue
        seen.add(question)
        tasks.append(answer_task(f"{prefix}-{split}/{len(tasks)}", f"{question}\n{ANSWER_INSTRUCTION}", answer,
                                 accepted, f"{worked}\nThe answer is \\boxed{{{answer}}}.", template=name,
                                 source=f"builtin:{prefix}-{split}"))
    return tasks
