"""Spec -> problem statement and reference code, in several styles.

Statements are templated on purpose: a tiny model trained from scratch must be able to learn the mapping from
phrase to code. Styles (all behave identically on a correct spec, and identically wrong on a buggy one):
  list / str families: `loop` (an accumulator), `comprehension` (a generator inside sum/len/max/join),
                       `builtin` (filter/map with lambdas);
  arith family:        `if` (if + return), `ifelse` (if / else blocks), `expr` (a conditional expression)."""
from __future__ import annotations

from codechat.tasks.synthetic.spec import tables

STYLES = {"list": ("comprehension", "loop", "builtin"), "str": ("comprehension", "loop", "builtin"),
          "arith": ("expr", "if", "ifelse")}
"""Styles per family; the first is the canonical reference (metadata["solution"])."""

_PARAM = {"xs": "xs", "range": "n", "s": "s"}
_NOUN = {"xs": "the numbers in xs", "range": "the numbers from 1 to n", "s": "the characters of s"}


def signature(spec: dict) -> str:
    return "f(n)" if spec["family"] == "arith" else f"f({_PARAM[spec['source']]})"


def statement(spec: dict) -> str:
    """The prompt: "Write a function `f(xs)` that keeps ..., squares them and returns their sum."."""
    preds, maps, reduces = tables(spec)
    if spec["family"] == "arith":
        then = maps[spec["then"][0]].noun.format(v="n", k=spec["then"][1])
        text = f"returns {then}"
        if spec["cond"]:
            cond = preds[spec["cond"][0]].singular.format(k=spec["cond"][1])
            other = "n" if spec["else"] is None else maps[spec["else"][0]].noun.format(v="n", k=spec["else"][1])
            text += f" if n is {cond}, otherwise {other}"
    else:
        noun, parts = _NOUN[spec["source"]], []
        if spec["filter"]:
            parts.append(f"keeps {noun} that are " + preds[spec["filter"][0]].plural.format(k=spec["filter"][1]))
        if spec["map"]:
            obj = "them" if parts else noun
            parts.append(maps[spec["map"][0]].verb.format(o=obj, k=spec["map"][1]))
        red = reduces[spec["reduce"]]
        parts.append(red.after if parts else red.alone.format(o=_PARAM[spec["source"]] if spec["source"] != "range"
                                                             else noun))
        text = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Write a function `{signature(spec)}` that {text}."


def _source(spec: dict) -> str:
    """The iterable the function walks, with the off-by-one bug when the spec carries it."""
    if spec["source"] == "range":
        return "range(1, n)" if spec.get("off_by_one") else "range(1, n + 1)"
    p = _PARAM[spec["source"]]
    return f"{p}[1:]" if spec.get("off_by_one") else p


def _pred(spec: dict, v: str) -> str | None:
    if not spec["filter"]:
        return None
    name, k = spec["filter"]
    return tables(spec)[0][name].code.format(v=v, k=k)


def _map(spec: dict, slot: list | None, v: str) -> str:
    return v if slot is None else tables(spec)[1][slot[0]].code.format(v=v, k=slot[1])


def code(spec: dict, style: str) -> str:
    """Reference solution for `spec` in `style` (a bug flag or a mutated constant in the spec shows up here)."""
    if spec["family"] == "arith":
        return _arith(spec, style)
    if style not in STYLES[spec["family"]]:
        raise ValueError(f"unknown style '{style}' for family {spec['family']} "
                         f"(valid: {', '.join(STYLES[spec['family']])})")
    body = _loop(spec) if style == "loop" else ["    return " + _expression(spec, style)]
    head = ["import math", ""] if style != "loop" and spec["reduce"] == "prod" else []
    return "\n".join(head + [f"def {signature(spec)}:"] + body) + "\n"


def _expression(spec: dict, style: str) -> str:
    v = "c" if spec["family"] == "str" else "x"
    src, pred, red = _source(spec), _pred(spec, v), spec["reduce"]
    if not spec["filter"] and not spec["map"]:                         # the reduction alone
        if red == "rjoin":
            return f"{src}[::-1]"
        return {"sum": f"sum({src})", "count": f"len({src})", "prod": f"math.prod({src})",
                "max": f"max([0, *{src}])" if spec.get("init0") else f"max({src}, default=0)",
                "min": f"min([0, *{src}])" if spec.get("init0") else f"min({src}, default=0)"}[red]
    if style == "comprehension":
        gen = f"{_map(spec, spec['map'], v)} for {v} in {src}" + (f" if {pred}" if pred else "")
        lst = f"[{gen}]"
    else:
        it = f"filter(lambda {v}: {pred}, {src})" if pred else src
        if spec["map"]:
            it = f"map(lambda {v}: {_map(spec, spec['map'], v)}, {it})"
        gen, lst = it, f"list({it})"
    if red in ("max", "min"):                                      # a bare generator cannot take default=
        arg = lst if style == "comprehension" else gen
        return f"{red}([0] + {lst})" if spec.get("init0") else f"{red}({arg}, default=0)"
    return {"list": lst, "sum": f"sum({gen})", "count": f"len({lst})", "prod": f"math.prod({gen})",
            "join": f"''.join({gen})", "rjoin": f"''.join({gen})[::-1]"}[red]


def _loop(spec: dict) -> list[str]:
    v = "c" if spec["family"] == "str" else "x"
    red, value, pred = spec["reduce"], _map(spec, spec["map"], v), _pred(spec, v)
    if red in ("max", "min"):
        cmp = ">" if red == "max" else "<"
        y = "y" if spec["map"] else v
        init, ret = ("best = 0", "return best") if spec.get("init0") else ("best = None",
                                                                          "return 0 if best is None else best")
        test = f"if {y} {cmp} best:" if spec.get("init0") else f"if best is None or {y} {cmp} best:"
        update = ([f"y = {value}"] if spec["map"] else []) + [test, f"    best = {y}"]
    else:
        acc, init, step = {"list": ("out", "[]", "out.append({e})"), "sum": ("total", "0", "total += {e}"),
                           "count": ("count", "0", "count += 1"), "prod": ("product", "1", "product *= {e}"),
                           "join": ("out", "''", "out += {e}"), "rjoin": ("out", "''", "out += {e}")}[red]
        init, update = f"{acc} = {init}", [step.format(e=value)]
        ret = f"return {acc}[::-1]" if red == "rjoin" else f"return {acc}"
    inner = "        " if pred else "    "
    lines = [f"    {init}", f"    for {v} in {_source(spec)}:"]
    if pred:
        lines.append(f"        if {pred}:")
    lines += [inner + "    " + u for u in update]
    return lines + [f"    {ret}"]


def _arith(spec: dict, style: str) -> str:
    if style not in STYLES["arith"]:
        raise ValueError(f"unknown style '{style}' for family arith (valid: {', '.join(STYLES['arith'])})")
    then = _map(spec, spec["then"], "n")
    lines = ["def f(n):"]
    if spec["cond"] is None:
        lines.append(f"    return {then}")
    else:
        name, k = spec["cond"]
        cond, other = tables(spec)[0][name].code.format(v="n", k=k), _map(spec, spec["else"], "n")
        if style == "expr":
            lines.append(f"    return {then} if {cond} else {other}")
        elif style == "if":
            lines += [f"    if {cond}:", f"        return {then}", f"    return {other}"]
        else:
            lines += [f"    if {cond}:", f"        return {then}", "    else:", f"        return {other}"]
    return "\n".join(lines) + "\n"
