"""Paired bootstrap confidence intervals for the difference between two evaluations of the same items.

`paired_bootstrap(a, b)`: a[i] and b[i] are scores of item i (a task's pass@1 estimate c/n, or a seed's final
pass@1) under A and B. The items are resampled with replacement `n_boot` times (seeded); the interval is the
percentile interval of the mean difference mean(b - a). Pairing removes the variance shared by both (a task
that is hard for both), so it is much narrower than comparing two unpaired intervals. Simplification: the
percentile interval, no bias correction (BCa); with few items (3 seeds) it is coarse and says so in `n`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PairedCI:
    """Mean difference B - A over paired items and its bootstrap interval."""
    diff: float
    """mean(b - a)."""
    lo: float
    """Lower end of the interval."""
    hi: float
    """Upper end of the interval."""
    n: int
    """Paired items."""
    level: float = 0.95
    """Coverage of the interval."""

    def __str__(self) -> str:
        return (f"{self.diff:+.4f} ({self.level:.0%} paired bootstrap CI {self.lo:+.4f} to {self.hi:+.4f}, "
                f"{self.n} paired items)")


def paired_bootstrap(a: list[float], b: list[float], n_boot: int = 10000, level: float = 0.95,
                     seed: int = 0) -> PairedCI:
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_bootstrap needs two equally long non-empty lists, got {len(a)} and {len(b)}")
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)  # (n,)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(n_boot, len(d)))  # (n_boot, n)
    means = d[idx].mean(axis=1)  # (n_boot,)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return PairedCI(float(d.mean()), float(lo), float(hi), len(d), level)
