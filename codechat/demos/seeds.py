"""A demo over several seeds (`codechat demo --seeds 0,1,2`, `codechat demo --agent --seeds 0,1,2`): one run per
seed under RUN_DIR/seed-N, one after another, then a table per seed with the mean and the range (min to max).

    parse_seeds("0,1,2")            -> [0, 1, 2]
    seed_table({seed: StageRow...}) -> single-answer demo: SFT and final pass@1 / greedy / pass@k per seed
    read_agent_rows(run_dir)        -> the agent demo's rows from RUN_DIR/rows.json
    agent_seed_table({seed: AgentRow...}, pooled, pooled_last) -> agent demo: resolve@1 and resolve@n per seed
                                     and stage, the change from SFT and GRPO's own change over RFT
    pooled_resolve_change({seed: run_dir}, a, b) -> resolve@1 change from stage a to b with the 95% paired
                                     bootstrap interval over every (task, seed) pair

Simplification: the pooled interval treats the (task, seed) pairs as independent items; seeds share the tasks,
so it is a little narrower than a two-level (task, then seed) bootstrap would be.
"""
from __future__ import annotations

import json
from pathlib import Path

from codechat import CodechatError
from codechat.demos.agent import AgentRow
from codechat.demos.demo import StageRow
from codechat.evaluation.stats import PairedCI, paired_bootstrap


def parse_seeds(text: str) -> list[int]:
    """`0,1,2` -> [0, 1, 2]; distinct non-negative integers, else a CodechatError naming the input."""
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise CodechatError(f"--seeds {text!r}: expected comma-separated integers such as 0,1,2") from None
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise CodechatError(f"--seeds {text!r}: expected distinct non-negative integers such as 0,1,2")
    return seeds


def spread(values: list[float], signed: bool = False) -> str:
    """`mean (min to max)` of point values, with signs for changes."""
    mean = sum(values) / len(values)
    sign = "+" if signed else ""
    return f"{mean:{sign}.1f} ({min(values):{sign}.1f} to {max(values):{sign}.1f})"


def _pts(x: float) -> float:
    return round(x * 100, 1)


def seed_table(results: dict[int, list[StageRow]]) -> str:
    """Markdown table: per seed the first (SFT) and last stage's pass@1 / greedy / pass@k and their change, then
    the mean and range of every column."""
    first = next(iter(results.values()))
    a0, b0, k = first[0].stage, first[-1].stage, first[0].k
    cols = ("pass1", "greedy", "passk")
    out = [f"| seed | {a0} pass@1 / greedy / pass@{k} | {b0} pass@1 / greedy / pass@{k} | "
           f"{b0} - {a0} (pass@1 / greedy / pass@{k}) | wall time |", "|---|---|---|---|---|"]
    vals: dict[str, list[float]] = {}
    for seed, rows in results.items():
        a, b = rows[0], rows[-1]
        av, bv = [_pts(getattr(a, c)) for c in cols], [_pts(getattr(b, c)) for c in cols]
        dv = [round(y - x, 1) for x, y in zip(av, bv)]
        for name, v in zip(("a", "b", "d"), (av, bv, dv)):
            for c, x in zip(cols, v):
                vals.setdefault(f"{name}.{c}", []).append(x)
        vals.setdefault("t", []).append(b.time_s / 60)
        out.append(f"| {seed} | {' / '.join(f'{x:.1f}' for x in av)} % | {' / '.join(f'{x:.1f}' for x in bv)} % | "
                   f"{' / '.join(f'{x:+.1f}' for x in dv)} | {b.time_s / 60:.1f} min |")
    if len(results) > 1:
        out.append("| mean (range) | " + " | ".join(" / ".join(spread(vals[f"{n}.{c}"], n == "d") for c in cols)
                                                  for n in ("a", "b", "d")) + f" | {spread(vals['t'])} min |")
    return "\n".join(out)


def pooled_resolve_change(run_dirs: dict[int, Path], a: str = "sft", b: str = "grpo") -> PairedCI | None:
    """resolve@1 change from RUN/eval-A to RUN/eval-B, paired over every (task, seed) both evaluated; None when
    no task is in both (or a run lacks either evaluation)."""
    x, y = [], []
    for run in run_dirs.values():
        paths = [Path(run) / f"eval-{s}" / "summary.json" for s in (a, b)]
        if not all(p.is_file() for p in paths):
            continue
        per = [json.loads(p.read_text())["per_task"] for p in paths]
        for i in sorted(set(per[0]) & set(per[1])):
            x.append(per[0][i]["c"] / per[0][i]["n"])
            y.append(per[1][i]["c"] / per[1][i]["n"])
    return paired_bootstrap(x, y) if x else None


def read_agent_rows(run_dir: Path) -> list[AgentRow]:
    """The agent demo's table rows from RUN_DIR/rows.json (written with its report)."""
    return [AgentRow(**r) for r in json.loads((Path(run_dir) / "rows.json").read_text())]


def agent_seed_table(results: dict[int, list[AgentRow]], pooled: PairedCI | None = None,
                     pooled_last: PairedCI | None = None) -> str:
    """Markdown table: per seed resolve@1 and resolve@n after SFT, after each later stage and the change from SFT
    to the end, with three stages also the last stage's own change (GRPO over RFT alone); the mean and range;
    then the pooled paired intervals (pooled_resolve_change) of SFT -> end and, when given, of the last stage."""
    first = next(iter(results.values()))
    names, k = [r.stage for r in first], first[0].k
    three = len(first) > 2
    head = "| seed | " + " | ".join(f"{s} resolve@1 / @{k}" for s in names) + f" | change resolve@1 / @{k} |" \
        + (f" {names[-1]} - {names[-2]} resolve@1 / @{k} |" if three else "") + " wall time |"
    out = [head, "|---" * (len(names) + 3 + three) + "|"]
    cols: dict[str, list[float]] = {}
    for seed, rows in results.items():
        v = {}
        for i, r in enumerate(rows):
            v[f"{i}.1"], v[f"{i}.k"] = _pts(r.resolve1), _pts(r.resolvek)
        last = len(rows) - 1
        v["d1"], v["dk"] = round(v[f"{last}.1"] - v["0.1"], 1), round(v[f"{last}.k"] - v["0.k"], 1)
        if three:
            v["l1"], v["lk"] = round(v[f"{last}.1"] - v[f"{last - 1}.1"], 1), \
                round(v[f"{last}.k"] - v[f"{last - 1}.k"], 1)
        for c, x in v.items():
            cols.setdefault(c, []).append(x)
        cols.setdefault("t", []).append(rows[-1].time_s / 60)
        out.append(f"| {seed} | " + " | ".join(f"{v[f'{i}.1']:.1f} / {v[f'{i}.k']:.1f} %" for i in range(len(rows)))
                   + f" | {v['d1']:+.1f} / {v['dk']:+.1f} |" + (f" {v['l1']:+.1f} / {v['lk']:+.1f} |" if three else "")
                   + f" {rows[-1].time_s / 60:.1f} min |")
    if len(results) > 1:
        out.append("| mean (range) | " + " | ".join(f"{spread(cols[f'{i}.1'])} / {spread(cols[f'{i}.k'])}"
                                                   for i in range(len(names)))
                   + f" | {spread(cols['d1'], True)} / {spread(cols['dk'], True)} |"
                   + (f" {spread(cols['l1'], True)} / {spread(cols['lk'], True)} |" if three else "")
                   + f" {spread(cols['t'])} min |")
    for label, ci in ((f"{names[0]} -> {names[-1]}", pooled), (f"{names[-2]} -> {names[-1]}", pooled_last)):
        if ci is not None:
            out += ["", f"resolve@1 change {label} {ci.diff * 100:+.1f} pts, 95% paired bootstrap interval over "
                        f"{ci.n} (task, seed) pairs {ci.lo * 100:+.1f} to {ci.hi * 100:+.1f} pts."]
    return "\n".join(out)
