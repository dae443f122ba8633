"""A synthetic problem as data: its spec (a JSON-able dict), what it computes, and the bugs that can be put in it.

Spec shapes (a slot is `[name, k]`, k None when the primitive has no constant):
  list:  {"family": "list", "source": "xs" | "range", "filter": slot|None, "map": slot|None, "reduce": name}
  str:   {"family": "str", "source": "s", "filter": slot|None, "map": slot|None, "reduce": name}
  arith: {"family": "arith", "cond": slot|None, "then": slot, "else": slot|None}
A spec may also carry bug flags, `off_by_one` and `init0` (see BUG_KINDS); `evaluate` honours them, so the
behaviour of a buggy reference is known without running its code."""
from __future__ import annotations

import copy
from typing import Any

from codechat.tasks.synthetic.primitives import (NUM_MAPS, NUM_PREDS, NUM_REDUCES, STR_MAPS, STR_PREDS,
                                                 STR_REDUCES)

BUG_KINDS = {
    "off_by_one": "the loop misses one element: `xs[1:]` / `s[1:]` skips the first, `range(1, n)` stops before n",
    "boundary": "a strict comparison swapped with a non-strict one: `>` for `>=`, `<=` for `<` (and back), "
                "`x >= 0` for positive, `x <= 0` for negative",
    "wrong_constant": "the first constant of the problem is one too large (`x > 4` for `x > 3`, `x % 5` for `x % 4`)",
    "wrong_init": "largest/smallest starts from 0 instead of 'no value yet', wrong when all values are negative "
                  "(largest) or positive (smallest)",
}
"""Plausible-but-wrong reference solutions: what a scraped, untested snippet typically gets wrong."""

_SWAP = {"gt": "ge", "ge": "gt", "lt": "le", "le": "lt"}
_SIGN_SWAP = {"pos": ["ge", 0], "neg": ["le", 0]}   # "positive" written `x >= 0`, "negative" written `x <= 0`


def tables(spec: dict) -> tuple[dict, dict, dict]:
    """(predicates, maps, reductions) for the spec's family."""
    if spec["family"] == "str":
        return STR_PREDS, STR_MAPS, STR_REDUCES
    return NUM_PREDS, NUM_MAPS, NUM_REDUCES


def slots(spec: dict) -> list[str]:
    """The operation slots of the family, in the order the statement mentions them."""
    return ["cond", "then", "else"] if spec["family"] == "arith" else ["filter", "map"]


def primitives(spec: dict) -> list[str]:
    """The primitive names a spec combines (constants left out), e.g. ['xs', 'even', 'square', 'sum']."""
    names = [] if spec["family"] == "arith" else [spec["source"]]
    names += [spec[s][0] if spec[s] else "-" for s in slots(spec)]
    if spec["family"] != "arith":
        names.append(spec["reduce"])
    return names


def composition(spec: dict) -> str:
    """The composition key: family and primitives, no constants. Splits are disjoint in this key."""
    return ":".join([spec["family"]] + primitives(spec))


def level(spec: dict) -> int:
    """Difficulty = number of operations (a collecting terminal such as 'as a list' does not count)."""
    n = sum(spec[s] is not None for s in slots(spec))
    if spec["family"] != "arith":
        n += not tables(spec)[2][spec["reduce"]].terminal
    return n


def evaluate(spec: dict, arg: Any) -> Any:
    """What the spec's function returns for `arg`, computed from the primitives' plain Python functions."""
    preds, maps, reduces = tables(spec)
    if spec["family"] == "arith":
        cond, then, other = spec["cond"], spec["then"], spec["else"]
        if cond is None or preds[cond[0]].fn(arg, cond[1]):
            return maps[then[0]].fn(arg, then[1])
        return arg if other is None else maps[other[0]].fn(arg, other[1])
    items = list(range(1, arg + 1)) if spec["source"] == "range" else list(arg)
    if spec.get("off_by_one"):
        items = items[:-1] if spec["source"] == "range" else items[1:]
    if spec["filter"]:
        name, k = spec["filter"]
        items = [x for x in items if preds[name].fn(x, k)]
    if spec["map"]:
        name, k = spec["map"]
        items = [maps[name].fn(x, k) for x in items]
    if spec.get("init0"):
        return (max if spec["reduce"] == "max" else min)([0] + items)
    return reduces[spec["reduce"]].fn(items)


def with_bug(spec: dict, kind: str) -> dict | None:
    """The spec with one bug of `kind` put in, or None when the kind does not apply to this spec."""
    if kind not in BUG_KINDS:
        raise ValueError(f"unknown bug kind '{kind}' (valid: {', '.join(BUG_KINDS)})")
    bug = copy.deepcopy(spec)
    if kind == "off_by_one":
        if spec["family"] == "arith":
            return None
        bug["off_by_one"] = True
        return bug
    if kind == "wrong_init":
        if spec["family"] == "arith" or spec["reduce"] not in ("max", "min"):
            return None
        bug["init0"] = True
        return bug
    for s in slots(spec):
        slot = spec[s]
        if slot is None:
            continue
        if kind == "boundary" and s in ("filter", "cond") and spec["family"] != "str":
            if slot[0] in _SWAP:
                bug[s] = [_SWAP[slot[0]], slot[1]]
                return bug
            if slot[0] in _SIGN_SWAP:
                bug[s] = list(_SIGN_SWAP[slot[0]])
                return bug
        if kind == "wrong_constant" and slot[1] is not None:
            bug[s] = [slot[0], slot[1] + 1]
            return bug
    return None


def ablations(spec: dict) -> list[dict]:
    """Specs that leave one operation out (or take one branch always). The asserts must tell each of them
    from the real spec, so a solution that ignores part of the statement fails."""
    out = []
    if spec["family"] == "arith":
        if spec["cond"] is not None:
            out.append({**spec, "cond": None, "else": None})                  # always the `then` branch
            out.append({**spec, "cond": None, "then": spec["else"] or ["add", 0], "else": None})  # always `else`
        return out
    for s in ("filter", "map"):
        if spec[s] is not None:
            out.append({**spec, s: None})
    return out
