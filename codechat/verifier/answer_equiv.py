"""Is an answer equivalent to a reference? Exact arithmetic for plain numbers here; everything else (LaTeX forms,
units, sets, intervals, tuples, equations, symbolic expressions) through math-verify in worker processes that are
killed at their time limit.

    pool = EquivPool(AnswerConfig())
    pool.compare_many([(["\\frac12"], "0.5"), (["x^2+2x+1"], "(x+1)^2")])   # -> [Outcome("equal"), ...]
    pool.close()

Rules, in order:
  1. percent (cfg.percent): `50%` is read as `50/100` (`ratio`), as `50` (`number`), or both ways (`both`);
     When both sides carry a percent sign, their numbers are compared as written (`0.5\\%` is not `50\\%`);
  2. both sides plain numbers (answer_extract.plain_number; `x = 5` reads as 5): integers and fractions compare
     exactly (a float compare would call 9007199254740993 and 9007199254740992 equal). `numbers = strict` (the
     default): an exact reference takes only its exact value (`1000000000.0` is not 1000000007, `0.3333333` is not
     1/3), a decimal reference is matched to half a unit of its last digit; `lenient`: a decimal on either side
     within `rel_tol` relative. Both sides sets of exact numbers (`1, 2`, `\\{2, 1\\}`): as sets;
  3. both sides write a known unit (`\\text{ m}^2`, `\\text{ cm}`) and the units differ: different
     (answer_units.py; math-verify drops units);
  4. otherwise math-verify in a worker (answer_worker.py): a timeout kills the worker and is reported as such.
     Strict: when the reference holds no decimal, the answer's decimals are read as exact rationals first, so
     `1.41421356` is not `\\sqrt{2}`.
Simplified: a worker serves one comparison at a time; `workers` of them run in parallel.
"""
from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from codechat import CodechatError
from codechat.config import AnswerConfig
from codechat.verifier.answer_extract import EXTRACTORS, has_percent, plain_number, strip_percent
from codechat.verifier.answer_units import units_differ

PERCENT_MODES = ("both", "ratio", "number")
NUMBER_MODES = ("strict", "lenient")
WORKER = Path(__file__).with_name("answer_worker.py")
STARTUP_S = 120.0
"""How long a new worker may take to import SymPy and math-verify (slow on a busy machine)."""


@dataclass(frozen=True)
class Outcome:
    """The result of one comparison."""
    status: str
    """`equal`, `different`, `timeout` (the worker was killed at the limit) or `error` (the library failed)."""
    message: str = ""
    """Detail for `error` and `timeout`."""
    symbolic: bool = False
    """True when the worker decided (False: the exact plain-number rule did)."""


def check_config(cfg: AnswerConfig) -> None:
    """One-line errors for values the types allow but the checker does not."""
    if cfg.percent not in PERCENT_MODES:
        raise CodechatError(f"verifier.answer.percent: '{cfg.percent}' is not one of {', '.join(PERCENT_MODES)}")
    if cfg.numbers not in NUMBER_MODES:
        raise CodechatError(f"verifier.answer.numbers: '{cfg.numbers}' is not one of {', '.join(NUMBER_MODES)}")
    bad = [e for e in cfg.extractors if e not in EXTRACTORS]
    if bad or not cfg.extractors:
        raise CodechatError(f"verifier.answer.extractors: {bad or 'empty'} (valid: {', '.join(EXTRACTORS)})")
    for key, ok in (("rel_tol", 0 <= cfg.rel_tol < 1), ("timeout_s", cfg.timeout_s > 0),
                    ("workers", cfg.workers >= 1), ("memory_mb", cfg.memory_mb >= 256 or cfg.memory_mb == 0),
                    ("max_answer_chars", cfg.max_answer_chars >= 1)):
        if not ok:
            raise CodechatError(f"verifier.answer.{key}: invalid value {getattr(cfg, key)!r}")


def percent_variants(s: str, mode: str) -> list[str]:
    """The readings of `s` under the percent rule (one reading when `s` has no trailing percent sign)."""
    if not has_percent(s):
        return [s]
    bare = strip_percent(s)
    ratio = f"\\frac{{{bare}}}{{100}}" if plain_number(bare) is None else str(plain_number(bare)[0] / 100)
    return {"ratio": [ratio], "number": [bare], "both": [ratio, bare]}[mode]


def _plain(s: str) -> tuple[Fraction, bool] | None:
    if "/" in s and s.count("/") == 1 and "frac" not in s:
        num, _, den = s.partition("/")
        a, b = plain_number(num), plain_number(den)
        if a and b and b[0] != 0 and not (a[1] or b[1]):
            return a[0] / b[0], False
    return plain_number(s)


_ASSIGN = re.compile(r"\s*[A-Za-z]\s*=\s*(.*)", re.S)
_SET = re.compile(r"\s*\\\{(.*)\\\}\s*", re.S)


def exact_value(s: str) -> tuple[Fraction, bool] | frozenset | None:
    """A plain number (value, written as a decimal), a set of exact plain numbers (`1, 2` or `\\{1, 2\\}`), or
    None when only the symbolic comparison can read `s`. `x = 5` reads as 5, as math-verify reads it."""
    m = _ASSIGN.fullmatch(s)
    if m:
        s = m.group(1)
    number = _plain(s)
    if number is not None:
        return number
    m = _SET.fullmatch(s)
    parts = (m.group(1) if m else s).split(",")
    if len(parts) < 2:
        return None
    values = [_plain(p) for p in parts]
    if any(v is None or v[1] for v in values):  # a decimal in a set: leave it to the library's rounding
        return None
    return frozenset(v[0] for v in values)


_DIGITS = re.compile(r"[^.eE]*?(?:\.(\d*))?(?:[eE]([+-]?\d{1,4}))?")


def last_digit_unit(s: str) -> Fraction:
    """The value of one unit in the last written digit of a plain decimal (`3.14` -> 1/100, `1.5e3` -> 100)."""
    m = _ASSIGN.fullmatch(s)
    s = (m.group(1) if m else s).strip().replace(",", "")
    m = _DIGITS.fullmatch(s.rstrip("$").strip())
    places = len(m.group(1) or "") if m else 0
    exp = int(m.group(2)) if m and m.group(2) else 0
    return Fraction(10) ** (exp - places)


def numbers_equal(a: tuple[Fraction, bool], b: tuple[Fraction, bool], rel_tol: float,
                  ref_unit: Fraction | None = None) -> bool:
    """`a` is the reference. `ref_unit` given (strict): an exact reference is equal only to its value, a decimal
    one to within half `ref_unit`; None (lenient): a decimal on either side within `rel_tol` relative."""
    (x, x_dec), (y, y_dec) = a, b
    if x == y:
        return True
    if ref_unit is not None:
        return bool(x_dec) and abs(x - y) <= ref_unit / 2
    if not (x_dec or y_dec):
        return False  # integers and fractions: exact
    return abs(x - y) <= Fraction(rel_tol) * max(abs(x), abs(y))


class _Worker:
    def __init__(self, memory_mb: int, numbers: str = "strict"):
        self.proc = subprocess.Popen([sys.executable, str(WORKER), str(memory_mb), numbers], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        self.buf = b""
        self.ready = False

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def send(self, obj) -> None:
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())

    def read_lines(self) -> list[dict] | None:
        """Lines available now (after select said readable); None at EOF (the worker died)."""
        chunk = os.read(self.fileno(), 1 << 16)
        if not chunk:
            return None
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        return [json.loads(ln) for ln in lines if ln.strip()]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class EquivPool:
    """Compares answers with references: exact rules in-process, symbolic ones in killable worker processes."""

    def __init__(self, cfg: AnswerConfig | None = None):
        self.cfg = cfg or AnswerConfig()
        check_config(self.cfg)
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                w.kill()
            self._workers = []

    def __enter__(self) -> "EquivPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- decisions ---------------------------------------------------------------------------------------------
    def pairs(self, refs: list[str], answer: str) -> list[list[str]]:
        """Every (reference reading, answer reading) under the percent rule."""
        mode, out = self.cfg.percent, []
        for ref in refs:
            if has_percent(ref) and has_percent(answer):  # one scale on both sides: the numbers as written
                out.append([strip_percent(ref), strip_percent(answer)])
            else:
                out += [[r, a] for r in percent_variants(ref, mode) for a in percent_variants(answer, mode)]
        return [[r, a] for r, a in out if not units_differ(r, a)]  # (`m^2` is not `cm^2`: answer_units.py)

    def exact(self, pairs: list[list[str]]) -> tuple[bool, list[list[str]]]:
        """(some plain-number pair is equal, the pairs that need the symbolic comparison)."""
        rest = []
        for r, a in pairs:
            x, y = exact_value(r), exact_value(a)
            if isinstance(x, tuple) and isinstance(y, tuple):
                unit = (last_digit_unit(r) if x[1] else Fraction(0)) if self.cfg.numbers == "strict" else None
                if numbers_equal(x, y, self.cfg.rel_tol, unit):
                    return True, []
            elif isinstance(x, frozenset) and isinstance(y, frozenset):
                if x == y:
                    return True, []
            else:
                rest.append([r, a])
        return False, rest

    def compare(self, refs: list[str], answer: str) -> Outcome:
        return self.compare_many([(refs, answer)])[0]

    def compare_many(self, items: list[tuple[list[str], str]]) -> list[Outcome]:
        """One Outcome per (references, answer), in order; symbolic ones run on `cfg.workers` workers at once."""
        out: list[Outcome | None] = [None] * len(items)
        todo: list[tuple[int, list[list[str]]]] = []
        for i, (refs, answer) in enumerate(items):
            try:
                equal, rest = self.exact(self.pairs(refs, answer))
            except (ValueError, ArithmeticError, RecursionError, MemoryError) as e:
                # model text the exact rule cannot hold (`1e5000\%`: a Fraction past the int-string digit limit)
                # is this answer's own error, never the batch's
                out[i] = Outcome("error", f"answer not comparable: {type(e).__name__}")
                continue
            if equal or not rest:
                out[i] = Outcome("equal" if equal else "different")
            else:
                todo.append((i, rest))
        if todo:
            with self._lock:
                self._run(todo, out)
        return out  # type: ignore[return-value]

    # --- workers -----------------------------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        w = _Worker(self.cfg.memory_mb, self.cfg.numbers)
        deadline = time.monotonic() + STARTUP_S
        while not w.ready:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([w], [], [], left)[0]:
                w.kill()
                raise CodechatError(f"answer worker did not start within {STARTUP_S:.0f}s")
            lines = w.read_lines()
            if lines is None:
                w.kill()
                raise CodechatError("answer worker exited at start: is math-verify installed? "
                                    "(pip install 'math-verify[antlr4_13_2]')")
            w.ready = any(ln.get("ready") for ln in lines)
        return w

    def _run(self, todo: list[tuple[int, list[list[str]]]], out: list) -> None:
        target = min(self.cfg.workers, len(todo))
        queue = list(reversed(todo))
        busy: dict[_Worker, tuple[int, float]] = {}  # worker -> (item index, deadline)
        idle = list(self._workers)
        while queue or busy:
            while queue and (idle or len(self._workers) < target):
                if not idle:  # started lazily, and again after a kill
                    self._workers.append(self._spawn())
                    idle.append(self._workers[-1])
                w = idle.pop()
                i, pairs = queue.pop()
                try:
                    w.send({"pairs": pairs})
                except OSError:  # died since its last answer: drop it and retry this item
                    self._drop(w)
                    queue.append((i, pairs))
                    continue
                busy[w] = (i, time.monotonic() + self.cfg.timeout_s)
            wait = max(0.0, min(d for _, d in busy.values()) - time.monotonic())
            for w in select.select(list(busy), [], [], wait)[0]:
                i, deadline = busy.pop(w)
                lines = w.read_lines()
                if lines is None:
                    out[i] = Outcome("error", "comparison worker died (memory limit or crash)", True)
                    self._drop(w)
                elif not lines:  # a partial line: the rest follows
                    busy[w] = (i, deadline)
                else:
                    reply = lines[-1]
                    out[i] = (Outcome("equal" if reply["equal"] else "different", symbolic=True)
                              if "equal" in reply else Outcome("error", reply.get("error", "bad reply"), True))
                    idle.append(w)
            now = time.monotonic()
            for w, (i, deadline) in list(busy.items()):
                if now >= deadline:  # really interrupts: the process is killed, whatever SymPy was doing
                    busy.pop(w)
                    out[i] = Outcome("timeout", f"comparison took more than {self.cfg.timeout_s:g}s", True)
                    self._drop(w)

    def _drop(self, w: _Worker) -> None:
        w.kill()
        self._workers.remove(w)
