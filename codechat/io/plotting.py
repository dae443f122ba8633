"""The one place figures are made and saved: `figure` / `save` (the demo and comparison plots) and
`plot_run(RUN_DIR)`: a run's curves as a grid of panels, one metric per panel, to RUN_DIR/curves.png.

    codechat plot runs/x                  # also written at the end of every run (log.plot)
    fig, ax = figure(7, 4); ax.plot(...); save(fig, "out.png")

Each panel is one metric over global steps, with the stages shaded and named along the top row. The loss gets
one panel per stage, each on its own y axis (an SFT NLL of 8 and a GRPO policy loss near 0 share no scale).
Rates (pass rates, fractions) are on a 0-100% axis; sparse metrics (evaluations) are drawn with markers.
Metrics a run did not log are left out; the half-written last line of a running run is skipped (runlog.py).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from codechat.io.runlog import read_metrics  # noqa: E402

# (key, title, is a rate in [0, 1]); eval/pass@K for the largest K and extra eval sets are added from the data
METRICS = [
    ("eval/pass@1", "eval pass@1", True), ("eval/greedy_pass@1", "eval greedy pass@1", True),
    ("reward_mean", "reward (mean)", False), ("pass_rate", "train pass rate", True),
    ("zero_var_frac", "zero-variance groups", True), ("kl", "KL to reference", False),
    ("entropy", "entropy", False), ("response_len_mean", "response length (tokens)", False),
    ("truncated_frac", "truncated samples", True), ("clip_frac_low", "clipped (low)", True),
    ("clip_frac_high", "clipped (high)", True), ("grad_norm", "grad norm", False), ("lr", "learning rate", False),
]
STAGE_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]
COLS = 4


def stage_spans(rows: list[dict]) -> list[tuple[str, float, float]]:
    """(stage, first step - 0.5, last step + 0.5) for each contiguous run of a stage, in order."""
    spans: list[list] = []
    for r in rows:
        st = r.get("stage")
        if st is None:
            continue
        if spans and spans[-1][0] == st:
            spans[-1][2] = r["step"]
        else:
            spans.append([st, r["step"], r["step"]])
    out: list[tuple[str, float, float]] = []
    for s, a, b in spans:  # a stage that starts on the step the last one ended on starts half a step later
        start = max(a - 0.5, out[-1][2]) if out else a - 0.5
        out.append((s, start, max(b + 0.5, start + 0.5)))
    return out


def panels(rows: list[dict]) -> list[tuple[str, str, bool, str | None]]:
    """(key, title, is_rate, stage or None) of every panel the run has data for."""
    present = {k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out = [(k, t, rate, None) for k, t, rate in METRICS[:2] if k in present]
    ks = sorted(int(k.split("@")[1]) for k in present if k.startswith("eval/pass@") and k != "eval/pass@1")
    if ks:
        out.append((f"eval/pass@{ks[-1]}", f"eval pass@{ks[-1]}", True, None))
    out += [(k, f"{k.split('/')[0][5:]} pass@1", True, None) for k in sorted(present)
            if k.startswith("eval_") and k.endswith("/pass@1")]
    out += [(k, t, rate, None) for k, t, rate in METRICS[2:] if k in present]
    for stage, _, _ in stage_spans(rows):
        if any(r.get("stage") == stage and isinstance(r.get("loss"), (int, float)) for r in rows) \
                and not any(p[3] == stage for p in out):
            out.append(("loss", f"loss ({stage})", False, stage))
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the run's curves to `out` (default RUN_DIR/curves.png); returns the path."""
    rows = read_metrics(run_dir)
    out = Path(out or Path(run_dir) / "curves.png")
    spans = stage_spans(rows)
    colors = {s: STAGE_COLORS[i % len(STAGE_COLORS)] for i, s in enumerate(dict.fromkeys(s for s, _, _ in spans))}
    todo = panels(rows) or [("step", "no metrics yet", False, None)]
    ncols = min(COLS, len(todo))
    nrows = math.ceil(len(todo) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.6 * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(todo):
            ax.set_visible(False)
            continue
        key, title, rate, stage = todo[i]
        for s, a, b in spans:
            ax.axvspan(a, b, color=colors[s], alpha=0.09, lw=0)
        if i < ncols:  # stage names along the top row
            for s, a, b in spans:
                ax.text((a + b) / 2, 1.02, s, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                        fontsize=7, color=colors[s])
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))
               and (stage is None or r.get("stage") == stage)]
        if pts:
            xs, ys = zip(*pts)
            sparse = len(pts) < 0.5 * len(rows) or len(pts) < 30
            ax.plot(xs, ys, lw=1.2, color=colors.get(stage, "#333333") if stage else "#333333",
                    marker="o" if sparse else None, ms=3)
        if stage and pts:  # a stage's loss: its own steps
            ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
        ax.set_title(title, fontsize=9, pad=12 if i < ncols else 4)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=5, integer=True))
        ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=4))
        if rate:
            ax.yaxis.set_major_formatter(ticker.PercentFormatter(1.0, decimals=0))
            if pts and max(ys) - min(ys) < 0.05:  # a flat rate: a 10-point window around it, not +-3%
                lo = min(max(0.0, (max(ys) + min(ys)) / 2 - 0.05), 0.9)
                ax.set_ylim(lo - 0.005, lo + 0.105)
        else:
            if pts and max(ys) - min(ys) <= 1e-9 * max(1e-30, abs(ys[0])):  # constant: +-50% around it
                ax.set_ylim(ys[0] - abs(ys[0]) / 2 - 1e-12, ys[0] + abs(ys[0]) / 2 + 1e-12)
            if key == "lr":
                ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.1e"))
        ax.grid(alpha=0.25, lw=0.5)
        if i >= len(todo) - ncols:
            ax.set_xlabel("step", fontsize=8)
    fig.suptitle(f"{Path(run_dir).name}: {' -> '.join(s for s, _, _ in spans) or 'no steps'}", fontsize=10)
    return save(fig, out, dpi=110)


def figure(width: float, height: float, ncols: int = 1):
    """-> (figure, axes): one axis, or a list of `ncols` axes side by side."""
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
    return fig, (axes[0][0] if ncols == 1 else list(axes[0]))


def save(fig, out: str | Path, dpi: int = 100) -> Path:
    """Write `fig` to `out` (PNG by its suffix), close it, return the path."""
    out = Path(out)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
