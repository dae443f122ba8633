"""Runs that learn nothing, said out loud; SIGTERM handled like Ctrl-C.

- `NoSignalWatch`: a GRPO/RLOO run whose groups have had one reward each (all pass or all fail: zero advantage,
  no gradient from the policy loss) for `PATIENCE` steps in a row gets a warning naming the cause and the fix.
- `warn_empty_round`: an RFT round in which no sample passed keeps nothing to fine-tune on.
- `sigterm_as_interrupt`: SIGTERM (a scheduler's kill, `kill PID`) raises KeyboardInterrupt in the main thread,
  so it stops the way Ctrl-C does: the step in progress is dropped and `--resume` continues from the last
  complete checkpoint (`resume_point` says which).

    with sigterm_as_interrupt():
        ...
"""
from __future__ import annotations

import contextlib
import signal
import threading
import warnings
from pathlib import Path

PATIENCE = 3
"""Steps in a row with every group at zero variance before the warning."""


class NoSignalWatch:
    """Counts consecutive RL steps whose every group had zero reward variance; warns once per streak."""

    def __init__(self, patience: int = PATIENCE):
        self.patience, self.streak = patience, 0

    def after_step(self, stage: str, metrics: dict) -> None:
        frac = metrics.get("zero_var_frac")
        if frac is None:
            return
        self.streak = self.streak + 1 if frac >= 1.0 else 0
        if self.streak == self.patience:
            rate = metrics.get("pass_rate")
            why = ("every sample passes" if rate == 1 else "no sample passes" if rate == 0
                   else "every sample of a group gets the same reward")
            warnings.warn(f"{stage}: {self.patience} steps in a row with 100% zero-variance groups ({why}): the "
                          "advantages are all 0 and the policy loss learns nothing. Raise sampling.temperature or "
                          "rl.group_size, or train on tasks the model solves sometimes (not always, not never); "
                          "rl.zero_variance=resample draws more prompts", stacklevel=2)


def warn_empty_round(rnd: int, samples: int) -> None:
    warnings.warn(f"rft: round {rnd} kept nothing (none of its {samples} samples passed), so it trains on nothing. "
                  "Start from a model that solves some tasks (an sft stage first), raise rft.group_size or "
                  "rft.prompts, or use easier tasks", stacklevel=2)


def resume_point(run_dir: str | Path, latest: Path | None) -> str:
    """The line that says where `--resume` continues."""
    if latest is None:
        return f"no checkpoint yet: codechat train --resume {run_dir} starts again from step 0"
    return f"codechat train --resume {run_dir} continues from {latest.relative_to(Path(run_dir))}"


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Inside: SIGTERM raises KeyboardInterrupt (main thread only; elsewhere a no-op). The old handler comes
    back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
