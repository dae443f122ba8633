"""The training progress display: on a terminal a live rich bar per stage (steps, ETA h:m:s, key metrics, the
sample / verify / update split of the last step); elsewhere (a log file, CI) one plain line per step.

    display = ProgressDisplay([("sft", 50), ("grpo", 100)])   # tty: detected from stderr
    display.update(record, step)                              # a metrics.jsonl record of global step `step`
    display.close()

Simplified: the ETA of a bar is rich's estimate from that stage's recent steps; the plain line's ETA is the run's
mean step time so far times the steps left, over all stages.
"""
from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

KEYS = [("loss", "loss"), ("reward_mean", "reward"), ("pass_rate", "pass"), ("zero_var_frac", "zero-var"),
        ("kl", "kl"), ("eval/pass@1", "eval pass@1"), ("eval/greedy_pass@1", "greedy")]
"""(metric, label) shown with each step, when the step logged it."""
SPLIT = [("time/sample_s", "sample"), ("time/verify_s", "verify"), ("time/update_s", "update")]


def hms(seconds: float) -> str:
    """Seconds -> h:mm:ss."""
    s = max(int(round(seconds)), 0)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def summary(rec: dict) -> str:
    """The key metrics and the time split of one record, e.g. 'loss 0.412 | pass 0.250 | sample 1.2s ...'."""
    parts = [f"{label} {rec[k]:.3f}" if isinstance(rec[k], float) else f"{label} {rec[k]}"
             for k, label in KEYS if rec.get(k) is not None]
    split = [f"{label} {rec[k]:.2f}s" for k, label in SPLIT if isinstance(rec.get(k), (int, float))]
    return " | ".join(parts + ([" ".join(split)] if split else []))


class ProgressDisplay:
    def __init__(self, stages: list[tuple[str, int]], tty: bool | None = None, console: Console | None = None):
        self.stages = stages
        self.offsets = [sum(n for _, n in stages[:i]) for i in range(len(stages))]
        self.total = sum(n for _, n in stages)
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self.t0, self.first_step = time.time(), None
        self.bars = None
        if self.tty:
            self.bars = Progress(TextColumn("{task.description:>6}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[metrics]}"),
                                 console=self.console, refresh_per_second=4)
            self.ids = [self.bars.add_task(name, total=max(n, 1), metrics="") for name, n in stages]
            self.bars.start()

    def _stage_of(self, step: int) -> int:
        for i in reversed(range(len(self.stages))):
            if step > self.offsets[i]:
                return i
        return 0

    def update(self, rec: dict, step: int) -> None:
        i = self._stage_of(step)
        if self.first_step is None:  # a resumed run starts past 0: the ETA counts the steps this process ran
            self.first_step = step - 1
        if self.bars is not None:
            self.bars.update(self.ids[i], completed=step - self.offsets[i], metrics=summary(rec))
            return
        done = step - self.first_step
        eta = (time.time() - self.t0) / max(done, 1) * (self.total - step)
        self.console.print(f"step {step}/{self.total} {self.stages[i][0]} eta {hms(eta)} | {summary(rec)}")

    def close(self) -> None:
        if self.bars is not None:
            self.bars.stop()
