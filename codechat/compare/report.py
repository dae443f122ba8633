"""The comparison's report from its results alone (OUT/results/*.json and OUT/sft_eval.json): a table per budget,
differences with a paired bootstrap over tasks and seeds, samples to a target pass rate, steadiness, the plot.

    text = report(load_results(out, methods, seeds), sft_point, target)

`paired_tasks_seeds` resamples seeds and tasks (a crossed bootstrap: the same task draw for every seed) of the
per-(seed, task) pass-rate differences B - A; seeds are paired (same SFT start, same data order), tasks are
paired (same held-out samples' seed). Simplification: the percentile interval; with 3 seeds the seed draw is
coarse, so the interval is a rough guide, not a test.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from codechat.compare.runs import Result, result_path
from codechat.evaluation.stats import PairedCI
from codechat.io.plotting import figure, save


def load_results(out: Path, methods: list[str], seeds: list[int]) -> dict[str, list[Result]]:
    """The results that exist, finished or not, per method in `methods` order."""
    got = {m: [Result.load(p) for s in seeds if (p := result_path(out, m, s)).is_file()] for m in methods}
    return {m: rs for m, rs in got.items() if rs}


def task_rates(point: dict) -> np.ndarray:
    """(T,) per-task pass rate c/n of one point."""
    return np.asarray(point["c"], dtype=np.float64) / max(point["n"], 1)


def paired_tasks_seeds(a: np.ndarray, b: np.ndarray, n_boot: int = 4000, level: float = 0.95,
                       seed: int = 0) -> PairedCI:
    """a, b (S, T): per-(seed, task) scores of methods A and B. Mean of b - a and its crossed bootstrap
    interval (seeds and tasks resampled with replacement, independently)."""
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_tasks_seeds needs two equal non-empty (seeds, tasks) arrays, got {a.shape}, {b.shape}")
    d = b - a  # (S, T)
    S, T = d.shape
    rng = np.random.default_rng(seed)
    si = rng.integers(0, S, size=(n_boot, S))  # (n_boot, S)
    ti = rng.integers(0, T, size=(n_boot, T))  # (n_boot, T)
    row_sums = np.stack([d[:, t].sum(axis=1) for t in ti])  # (n_boot, S): each seed's sum over the task draw
    means = np.take_along_axis(row_sums, si, axis=1).mean(axis=1) / T  # (n_boot,)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return PairedCI(float(d.mean()), float(lo), float(hi), S * T, level)


def point_at(r: Result, budget: int) -> dict | None:
    return next((p for p in r.points if p["budget"] == budget), None)


def mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, (sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1)) ** 0.5


def pct(v) -> str:
    return "–" if v is None else f"{v:.1%}"


def _avg(pts: list[dict], key: str):
    xs = [p[key] for p in pts if p.get(key) is not None]
    return sum(xs) / len(xs) if xs else None


def budget_table(results: dict[str, list[Result]], budget: int) -> list[str]:
    """Rows at one budget, and each method's difference from the first method over the seeds both reached."""
    methods = list(results)
    out = [f"| method | seeds | pass@1 (mean ± std over seeds) | greedy pass@1 | Δ pass@1 vs {methods[0]} "
           "(95% CI, tasks × seeds) | tokens sampled | update s | train wall | clip fraction | zero-var groups |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    base = {r.seed: point_at(r, budget) for r in results[methods[0]]}
    for m in methods:
        pts = [(r.seed, p) for r in results[m] if (p := point_at(r, budget)) is not None]
        if not pts:
            out.append(f"| {m} | 0 | not run | | | | | | | |")
            continue
        mu, sd = mean_std([p["pass1"] for _, p in pts])
        both = [(base[s], p) for s, p in pts if base.get(s) is not None]
        if m == methods[0] or not both:
            diff = "–"
        else:
            ci = paired_tasks_seeds(np.stack([task_rates(a) for a, _ in both]),
                                    np.stack([task_rates(b) for _, b in both]))
            diff = f"{ci.diff * 100:+.1f} pts ({ci.lo * 100:+.1f} to {ci.hi * 100:+.1f}; {len(both)} seeds)"
        ps = [p for _, p in pts]
        out.append(f"| {m} | {len(ps)} | {mu:.1%} ± {sd:.1%} | {pct(_avg(ps, 'greedy'))} | {diff} | "
                   f"{_avg(ps, 'tokens') / 1e3:.0f}k | {_avg(ps, 'update_s'):.0f} s | "
                   f"{_avg(ps, 'train_s') / 60:.1f} min | {pct(_avg(ps, 'clip'))} | {pct(_avg(ps, 'zero_var'))} |")
    return out


def steadiness(results: dict[str, list[Result]], target: float) -> list[str]:
    """Per method: samples to reach `target` (first point at or above it), the mean absolute change of pass@1
    between consecutive points, and the seed std averaged over budgets."""
    out = [f"| method | samples to {target:.1%} held-out pass@1 (mean; reached/seeds) | eval-to-eval change "
           "(mean abs) | seed std of pass@1 (mean over budgets) |", "|---|---|---|---|"]
    for m, rs in results.items():
        reach = [next((p["samples"] for p in r.points if p["pass1"] >= target), None) for r in rs]
        hit = [x for x in reach if x is not None]
        steps = [abs(b["pass1"] - a["pass1"]) for r in rs for a, b in zip(r.points, r.points[1:])]
        budgets = sorted({p["budget"] for r in rs for p in r.points})
        stds = [mean_std(v)[1] for b in budgets
                if len(v := [p["pass1"] for r in rs if (p := point_at(r, b)) is not None]) > 1]
        out.append(f"| {m} | {f'{sum(hit) / len(hit):,.0f}' if hit else 'not reached'} ({len(hit)}/{len(rs)}) | "
                   f"{pct(sum(steps) / len(steps) if steps else None)} | {pct(sum(stds) / len(stds) if stds else None)} |")
    return out


def report(results: dict[str, list[Result]], sft: dict, target: float, budgets: list[int], seeds: list[int]) -> str:
    """The markdown report: SFT line, one table per budget, steadiness and samples to target, what is missing."""
    lines = [f"SFT checkpoint: held-out pass@1 {sft['pass1']:.1%}, greedy {pct(sft.get('greedy'))} "
             f"({len(sft['c'])} tasks x {sft['n']} samples); target {target:.1%}."]
    reached = [b for b in budgets if any(point_at(r, b) for rs in results.values() for r in rs)]
    for b in reached:
        lines += ["", f"**At {b:,} sampled completions**", "", *budget_table(results, b)]
    if len(reached) < len(budgets):
        lines += ["", f"No run has reached {', '.join(f'{b:,}' for b in budgets if b not in reached)} completions yet."]
    lines += ["", *steadiness(results, target)]
    missing = [f"{m} seed {s}" + (f" (to {len(r.points)}/{len(budgets)} budgets)" if r else "")
               for m in results for s in seeds
               if (r := next((x for x in results[m] if x.seed == s), None)) is None or not r.finished]
    if missing:
        lines += ["", "Not finished: " + ", ".join(missing) + "."]
    return "\n".join(lines)


def plot(results: dict[str, list[Result]], sft: dict, out: Path) -> Path:
    """Held-out pass@1 against sampled completions: each seed thin, the seed mean thick (budgets all seeds reached)."""
    fig, ax = figure(7, 4)
    for i, (m, rs) in enumerate(results.items()):
        for r in rs:
            ax.plot([0] + [p["samples"] for p in r.points], [sft["pass1"]] + [p["pass1"] for p in r.points],
                    color=f"C{i}", alpha=0.35, lw=1)
        n = min(len(r.points) for r in rs)
        xs = [sum(r.points[k]["samples"] for r in rs) / len(rs) for k in range(n)]
        ys = [sum(r.points[k]["pass1"] for r in rs) / len(rs) for k in range(n)]
        ax.plot([0] + xs, [sft["pass1"]] + ys, color=f"C{i}", lw=2, marker="o", ms=3, label=f"{m} (mean)")
    ax.set_xlabel("sampled completions (rollouts, RFT included)")
    ax.set_ylabel("held-out pass@1 (T=1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out)
