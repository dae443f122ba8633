"""The primitives the synthetic family composes: predicates (list filters / arithmetic conditions), maps,
reductions, and their string counterparts. Each carries its English phrase, its code template and a plain Python
function; the function is the ground truth the hidden asserts are computed from, the template only renders
reference solutions (tests check that the two agree).

Templates use `{v}` for the variable and `{k}` for the primitive's constant, when it has one."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Pred:
    """A condition on one value: a list filter ("keeps the numbers in xs that are ...") or an `if` condition."""
    name: str
    plural: str
    """Phrase after "that are": "even", "greater than {k}", "multiples of {k}"."""
    singular: str
    """Phrase after "if n is": "even", "a multiple of {k}"."""
    code: str
    """Python template, e.g. "{v} >= {k}"."""
    fn: Callable[[Any, Any], bool]
    consts: tuple = ()
    """Values the constant k is drawn from; empty when the primitive has none."""


@dataclass(frozen=True)
class Map:
    """A transformation of one value."""
    name: str
    verb: str
    """Phrase applied to an object {o} ("them", "the numbers in xs"): "adds {k} to {o}"."""
    noun: str
    """Phrase naming the result for a variable {v}: "{v} plus {k}", "the square of {v}"."""
    code: str
    fn: Callable[[Any, Any], Any]
    consts: tuple = ()


@dataclass(frozen=True)
class Reduce:
    """What happens to the kept, mapped values at the end."""
    name: str
    after: str
    """Phrase after a filter or map: "returns their sum"."""
    alone: str
    """Phrase when it is the only operation, with {o} the source: "returns the sum of {o}"."""
    fn: Callable[[list], Any]
    terminal: bool = False
    """Collects the values (a list or a string) rather than reducing them; not counted as an operation."""
    needs_import: str = ""
    """A module the reference must import (math.prod)."""


THRESHOLDS = (1, 2, 3, 4, 5, 6)

NUM_PREDS = {p.name: p for p in [
    Pred("even", "even", "even", "{v} % 2 == 0", lambda x, k: x % 2 == 0),
    Pred("odd", "odd", "odd", "{v} % 2 == 1", lambda x, k: x % 2 == 1),
    Pred("pos", "positive", "positive", "{v} > 0", lambda x, k: x > 0),
    Pred("neg", "negative", "negative", "{v} < 0", lambda x, k: x < 0),
    Pred("gt", "greater than {k}", "greater than {k}", "{v} > {k}", lambda x, k: x > k, THRESHOLDS),
    Pred("ge", "at least {k}", "at least {k}", "{v} >= {k}", lambda x, k: x >= k, THRESHOLDS),
    Pred("lt", "less than {k}", "less than {k}", "{v} < {k}", lambda x, k: x < k, THRESHOLDS),
    Pred("le", "at most {k}", "at most {k}", "{v} <= {k}", lambda x, k: x <= k, THRESHOLDS),
    Pred("div", "multiples of {k}", "a multiple of {k}", "{v} % {k} == 0", lambda x, k: x % k == 0, (3, 4, 5)),
]}

NUM_MAPS = {m.name: m for m in [
    Map("square", "squares {o}", "the square of {v}", "{v} * {v}", lambda x, k: x * x),
    Map("double", "doubles {o}", "twice {v}", "{v} * 2", lambda x, k: x * 2),
    Map("add", "adds {k} to {o}", "{v} plus {k}", "{v} + {k}", lambda x, k: x + k, (1, 2, 3, 4, 5)),
    Map("sub", "subtracts {k} from {o}", "{v} minus {k}", "{v} - {k}", lambda x, k: x - k, (1, 2, 3, 4, 5)),
    Map("mul", "multiplies {o} by {k}", "{v} times {k}", "{v} * {k}", lambda x, k: x * k, (3, 4, 5)),
    Map("neg", "negates {o}", "the negative of {v}", "-{v}", lambda x, k: -x),
    Map("abs", "takes the absolute value of {o}", "the absolute value of {v}", "abs({v})", lambda x, k: abs(x)),
    Map("mod", "takes {o} modulo {k}", "{v} modulo {k}", "{v} % {k}", lambda x, k: x % k, (2, 3, 4, 5)),
]}

NUM_REDUCES = {r.name: r for r in [
    Reduce("sum", "returns their sum", "returns the sum of {o}", sum),
    Reduce("count", "returns how many there are", "returns the length of {o}", len),
    Reduce("max", "returns the largest (0 if none)", "returns the largest of {o} (0 if none)",
           lambda ys: max(ys, default=0)),
    Reduce("min", "returns the smallest (0 if none)", "returns the smallest of {o} (0 if none)",
           lambda ys: min(ys, default=0)),
    Reduce("prod", "returns their product", "returns the product of {o}", math.prod, needs_import="math"),
    Reduce("list", "returns them as a list", "", list, terminal=True),
]}

STR_PREDS = {p.name: p for p in [
    Pred("vowel", "vowels", "a vowel", "{v} in 'aeiou'", lambda c, k: c in "aeiou"),
    Pred("digit", "digits", "a digit", "{v}.isdigit()", lambda c, k: c.isdigit()),
    Pred("upper", "uppercase letters", "an uppercase letter", "{v}.isupper()", lambda c, k: c.isupper()),
    Pred("lower", "lowercase letters", "a lowercase letter", "{v}.islower()", lambda c, k: c.islower()),
    Pred("letter", "letters", "a letter", "{v}.isalpha()", lambda c, k: c.isalpha()),
    Pred("nonspace", "not spaces", "not a space", "{v} != ' '", lambda c, k: c != " "),
]}

STR_MAPS = {m.name: m for m in [
    Map("upper", "uppercases {o}", "{v} in upper case", "{v}.upper()", lambda c, k: c.upper()),
    Map("lower", "lowercases {o}", "{v} in lower case", "{v}.lower()", lambda c, k: c.lower()),
    Map("swap", "swaps the case of {o}", "{v} with its case swapped", "{v}.swapcase()", lambda c, k: c.swapcase()),
    Map("double", "doubles {o}", "{v} twice", "{v} * 2", lambda c, k: c * 2),
]}

STR_REDUCES = {r.name: r for r in [
    Reduce("join", "returns them as a string", "", "".join, terminal=True),
    Reduce("rjoin", "returns them reversed as a string", "returns {o} reversed", lambda cs: "".join(cs)[::-1]),
    Reduce("count", "returns how many there are", "returns the length of {o}", len),
]}

# Characters the string inputs are drawn from. No uppercase vowels, so "vowels" ('aeiou') is unambiguous.
STR_ALPHABET = "aeiouaeiou" + "bcdfghklmnprstxyz" + "BCDFGHKLMNPRST" + "0123456789" + "   "

RARE_PRIMITIVES = ("min", "mod", "le")
"""Tasks using any of these form the `rare` region (metadata["region"]); `sft_examples(rare_keep=...)` thins them
out of the SFT data so that RL prompts can come from a part of the task space imitation saw little of. Each has
a common sibling (max, add/sub, lt) it can be learned from."""
