"""A demo over several seeds (`codechat demo --seeds 0,1,2`, `codechat demo --agent --seeds 0,1,2`): one run per
seed under RUN_DIR/seed-N, one after another, then a table per seed with the mean and the range (min to max).

    parse_seeds("0,1,2")            -> [0, 1, 2]
    seed_table({seed: StageRow...}) -> single-answer demo: SFT and final pass@1 / greedy / pass@k per seed
    read_agent_rows(run_dir)        -> the agent demo's rows from RUN_DIR/rows.json
    agent_seed_table({seed: AgentRow...}, pooled) -> agent demo: resolve@1 and resolve@n per seed
    pooled_resolve_change({seed: run_dir}) -> resolve@1 change with the 95% paired bootstrap interval over every
                                     (task, seed) pair: each pair's c/n after SFT and after GRPO

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


def pooled_resolve_change(run_dirs: dict[int, Path]) -> PairedCI | None:
    """resolve@1 change from RUN/eval-sft to RUN/eval-grpo, paired over every (task, seed) both evaluated; None
    when no task is in both."""
    a, b = [], []
    for run in run_dirs.values():
        per = [json.loads((Path(run) / f"eval-{s}" / "summary.json").read_text())["per_task"] for s in ("sft", "grpo")]
        for i in sorted(set(per[0]) & set(per[1])):
            a.append(per[0][i]["c"] / per[0][i]["n"])
            b.append(per[1][i]["c"] / per[1][i]["n"])
    return paired_bootstrap(a, b) if a else None


def read_agent_rows(run_dir: Path) -> list[AgentRow]:
    """The agent demo's table rows from RUN_DIR/rows.json (written with its report)."""
    return [AgentRow(**r) for r in json.loads((Path(run_dir) / "rows.json").read_text())]


def agent_seed_table(results: dict[int, list[AgentRow]], pooled: PairedCI | None = None) -> str:
    """Markdown table: per seed resolve@1 and resolve@n after SFT and at the end and the change, the mean and
    range, then the pooled paired interval (pooled_resolve_change) when given."""
    first = next(iter(results.values()))
    a0, b0, k = first[0].stage, first[-1].stage, first[0].k
    out = [f"| seed | {a0} resolve@1 / @{k} | {b0} resolve@1 / @{k} | change resolve@1 / @{k} | wall time |",
           "|---|---|---|---|---|"]
    cols: dict[str, list[float]] = {}
    for seed, rows in results.items():
        a, b = rows[0], rows[-1]
        v = {"a1": _pts(a.resolve1), "ak": _pts(a.resolvek), "b1": _pts(b.resolve1), "bk": _pts(b.resolvek)}
        v["d1"], v["dk"] = round(v["b1"] - v["a1"], 1), round(v["bk"] - v["ak"], 1)
        for c, x in v.items():
            cols.setdefault(c, []).append(x)
        cols.setdefault("t", []).append(b.time_s / 60)
        out.append(f"| {seed} | {v['a1']:.1f} / {v['ak']:.1f} % | {v['b1']:.1f} / {v['bk']:.1f} % | "
                   f"{v['d1']:+.1f} / {v['dk']:+.1f} | {b.time_s / 60:.1f} min |")
    if len(results) > 1:
        out.append(f"| mean (range) | {spread(cols['a1'])} / {spread(cols['ak'])} | {spread(cols['b1'])} / "
                   f"{spread(cols['bk'])} | {spread(cols['d1'], True)} / {spread(cols['dk'], True)} | "
                   f"{spread(cols['t'])} min |")
    if pooled is not None:
        out += ["", f"resolve@1 change {pooled.diff * 100:+.1f} pts, 95% paired bootstrap interval over "
                    f"{pooled.n} (task, seed) pairs {pooled.lo * 100:+.1f} to {pooled.hi * 100:+.1f} pts."]
    return "\n".join(out)
