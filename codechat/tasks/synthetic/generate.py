"""Enumerate compositions, split them into train / held-out, and turn sampled specs into `Task`s with hidden
asserts chosen so that every applicable bug and every dropped operation fails at least one of them."""
from __future__ import annotations

import random
import zlib
from functools import lru_cache
from typing import Any

from codechat.tasks.model import Task
from codechat.tasks.synthetic.primitives import (NUM_MAPS, NUM_PREDS, NUM_REDUCES, RARE_PRIMITIVES, STR_ALPHABET,
                                                 STR_MAPS, STR_PREDS, STR_REDUCES)
from codechat.tasks.synthetic.render import STYLES, code, statement
from codechat.tasks.synthetic.spec import BUG_KINDS, ablations, composition, evaluate, level, primitives, with_bug

SPLITS = ("train", "heldout")
HELDOUT_PERCENT = 20
"""Share of level-2 and level-3 compositions held out. Level 1 (every single primitive) is always in train."""
FAMILY_WEIGHTS = {"list": 0.5, "arith": 0.3, "str": 0.2}
LEVEL_WEIGHTS = {"train": {1: 0.2, 2: 0.4, 3: 0.4}, "heldout": {2: 0.5, 3: 0.5}}
MAX_ASSERTS, MIN_ASSERTS = 6, 5


def _list_comps() -> list[dict]:
    out = []
    for source in ("xs", "range"):
        for filt in [None, *NUM_PREDS]:
            for mp in [None, *NUM_MAPS]:
                for red in NUM_REDUCES:
                    if red == "count" and mp or (red == "count" and source == "range" and not filt):
                        continue                       # the map cannot change a count; len(range) is just n
                    out.append({"family": "list", "source": source, "filter": filt, "map": mp, "reduce": red})
    return out


def _str_comps() -> list[dict]:
    out = []
    for filt in [None, *STR_PREDS]:
        kept = [c for c in set(STR_ALPHABET) if filt is None or STR_PREDS[filt].fn(c, None)]
        for mp in [None, *STR_MAPS]:
            if mp and all(STR_MAPS[mp].fn(c, None) == c for c in kept):
                continue                               # e.g. uppercasing digits changes nothing
            for red in STR_REDUCES:
                if red == "count" and mp:
                    continue
                out.append({"family": "str", "source": "s", "filter": filt, "map": mp, "reduce": red})
    return out


def _arith_comps() -> list[dict]:
    out = []
    for cond in [None, *NUM_PREDS]:
        for then in NUM_MAPS:
            for other in [None, *NUM_MAPS]:
                if (cond is None and other is not None) or other == then:
                    continue
                out.append({"family": "arith", "cond": cond, "then": then, "else": other})
    return out


def _skeleton_spec(comp: dict) -> dict:
    """A composition with placeholder slots, enough to compute its key and level."""
    spec = dict(comp)
    for s in ("filter", "map", "cond", "then", "else"):
        if s in spec and spec[s] is not None:
            spec[s] = [spec[s], None]
    return spec


def split_of(comp_key: str, lvl: int) -> str:
    """Which split a composition belongs to: a fixed hash of its key, the same for every seed."""
    if lvl >= 2 and zlib.crc32(comp_key.encode()) % 100 < HELDOUT_PERCENT:
        return "heldout"
    return "train"


@lru_cache(maxsize=None)
def compositions() -> dict[tuple[str, str, int], list[dict]]:
    """(split, family, level) -> compositions (specs without constants)."""
    out: dict[tuple[str, str, int], list[dict]] = {}
    for comp in _list_comps() + _str_comps() + _arith_comps():
        spec = _skeleton_spec(comp)
        lvl = level(spec)
        if lvl == 0:
            continue
        out.setdefault((split_of(composition(spec), lvl), comp["family"], lvl), []).append(comp)
    return out


def _constants(comp: dict, rng: random.Random) -> dict:
    spec = dict(comp)
    preds, maps = (STR_PREDS, STR_MAPS) if comp["family"] == "str" else (NUM_PREDS, NUM_MAPS)
    for s, table in (("filter", preds), ("cond", preds), ("map", maps), ("then", maps), ("else", maps)):
        if spec.get(s) is not None:
            consts = table[spec[s]].consts
            spec[s] = [spec[s], rng.choice(consts) if consts else None]
    return spec


def _input_pool(spec: dict, rng: random.Random) -> list[Any]:
    """Candidate arguments, edge cases first (the first one is always asserted)."""
    ks = [slot[1] for s in ("filter", "cond") if (slot := spec.get(s)) and isinstance(slot[1], int)]
    if spec["family"] == "arith":
        pool = [0, -3] + [k + d for k in ks for d in (-1, 0, 1)] + [rng.randint(-9, 12) for _ in range(10)]
        return pool + list(range(-6, 13))
    if spec["family"] == "str":
        kept = sorted(c for c in set(STR_ALPHABET) if not spec["filter"] or STR_PREDS[spec["filter"][0]].fn(c, None))
        rand = ["".join(rng.choice(STR_ALPHABET) for _ in range(rng.randint(3, 8))) for _ in range(16)]
        return ["", "Hi Bob 42"] + [rng.choice(kept) + r for r in rand[:6]] + rand[6:]
    if spec["source"] == "range":
        return [0, 1] + ks + [rng.randint(2, 9) for _ in range(6)] + list(range(2, 10))
    pool = [[], [-3, -8, -1], [4, 9, 1]] + [[k - 1, k, k + 1, -k] for k in ks]
    return pool + [[rng.randint(-9, 9) for _ in range(rng.randint(1, 6))] for _ in range(14)]


def _choose_inputs(spec: dict, rng: random.Random) -> tuple[list[Any], list[str]] | None:
    """Pick 5-6 inputs: the edge case, then greedily inputs that expose each bug and each ablation, then random
    fill. Returns (inputs, bug kinds the chosen asserts catch), or None for a degenerate spec."""
    pool = _input_pool(spec, rng)
    truth = [evaluate(spec, a) for a in pool]
    if len({repr(t) for t in truth}) == 1 or truth == pool:
        return None          # constant ("numbers from 1 to n below 1") or identity ("largest of 1..n") on all inputs
    rivals: dict[str, dict] = {k: b for k in BUG_KINDS if (b := with_bug(spec, k)) is not None}
    rivals.update({f"ablation{i}": a for i, a in enumerate(ablations(spec))})
    # which pool inputs tell each rival from the truth
    catches = {name: {i for i, a in enumerate(pool) if evaluate(r, a) != truth[i]} for name, r in rivals.items()}
    if any(not c for name, c in catches.items() if name.startswith("ablation")):
        return None          # an operation that changes nothing ("absolute value of the numbers from 1 to n")
    chosen = [0]
    order = list(range(1, len(pool)))
    rng.shuffle(order)
    uncovered = {n for n, c in catches.items() if c and 0 not in c}
    while uncovered and len(chosen) < MAX_ASSERTS:
        best = max(order, key=lambda i: sum(i in catches[n] for n in uncovered))
        if not any(best in catches[n] for n in uncovered):
            break
        chosen.append(best)
        uncovered = {n for n in uncovered if best not in catches[n]}
    for i in order:                                     # fill with distinct inputs, preferring distinct outputs
        if len(chosen) >= MIN_ASSERTS:
            break
        if pool[i] not in [pool[j] for j in chosen] and truth[i] not in [truth[j] for j in chosen]:
            chosen.append(i)
    for i in order:
        if len(chosen) >= MIN_ASSERTS:
            break
        if pool[i] not in [pool[j] for j in chosen]:
            chosen.append(i)
    bugs = [k for k in BUG_KINDS if k in catches and catches[k] & set(chosen)]
    return [pool[i] for i in chosen], bugs


def make_task(spec: dict, task_id: str, rng: random.Random, split: str | None = None) -> Task | None:
    """A `Task` for a spec with constants: prompt, hidden asserts, references in every style, detectable bugs.
    None when the spec is degenerate (the same answer for every input)."""
    chosen = _choose_inputs(spec, rng)
    if chosen is None:
        return None
    inputs, bugs = chosen
    tests = [f"assert f({a!r}) == {evaluate(spec, a)!r}" for a in inputs]
    styles = STYLES[spec["family"]]
    solutions = {s: code(spec, s) for s in styles}
    prims = primitives(spec)
    meta = {"solution": solutions[styles[0]], "solutions": solutions, "spec": spec, "family": spec["family"],
            "level": level(spec), "split": split or split_of(composition(spec), level(spec)),
            "composition": composition(spec), "primitives": [p for p in prims if p != "-"], "bugs": bugs,
            "region": "rare" if set(prims) & set(RARE_PRIMITIVES) else "common", "source": "synthetic"}
    return Task(task_id, statement(spec), tests, "f", "", None, meta)


def generate_tasks(split: str, n: int, seed: int = 0, level: int | None = None,
                   families: tuple[str, ...] | None = None) -> list[Task]:
    """`n` distinct tasks from `split` ('train' or 'heldout'). Same arguments -> same tasks. `level` (1-3) fixes
    the number of operations; held-out has levels 2 and 3 only. `families` restricts to 'list', 'str', 'arith'."""
    if split not in SPLITS:
        raise ValueError(f"unknown split '{split}' (valid: {', '.join(SPLITS)})")
    fams = tuple(families or FAMILY_WEIGHTS)
    for fam in fams:
        if fam not in FAMILY_WEIGHTS:
            raise ValueError(f"unknown family '{fam}' (valid: {', '.join(FAMILY_WEIGHTS)})")
    levels = [level] if level is not None else list(LEVEL_WEIGHTS[split])
    if any(lv not in LEVEL_WEIGHTS[split] for lv in levels):
        raise ValueError(f"split '{split}' has levels {sorted(LEVEL_WEIGHTS[split])}, not {level}")
    comps = compositions()
    groups = [(fam, lv) for fam in fams for lv in levels if comps.get((split, fam, lv))]
    weights = [FAMILY_WEIGHTS[f] * LEVEL_WEIGHTS[split][lv] for f, lv in groups]
    rng = random.Random(f"synthetic:{split}:{seed}:{level}:{','.join(fams)}")
    tasks, seen, misses = [], set(), 0
    while len(tasks) < n and misses < 2000:             # 2000 draws in a row without a new task: space exhausted
        misses += 1
        fam, lv = rng.choices(groups, weights)[0]
        spec = _constants(rng.choice(comps[(split, fam, lv)]), rng)
        key = repr(spec)
        if key in seen:
            continue
        seen.add(key)
        task = make_task(spec, f"synthetic/{split}-{seed}/{len(tasks):04d}", rng, split)
        if task is not None:
            tasks.append(task)
            misses = 0
    if len(tasks) < n:
        raise ValueError(f"only {len(tasks)} distinct tasks in split '{split}' for these settings, asked {n}")
    return tasks
