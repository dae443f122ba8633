"""Modules the pristine judge loads once a job needed them, so that later jobs' forks start with them loaded.

Each job's task code runs in a child forked from the pristine judge (judge_proc.py); what it imports dies with
it. A task family whose tests or checker import a heavy module (numpy for a program's arrays, sympy in a
checker) would pay that import on every job. So after a job the pristine judge imports the modules the job
imported, but only those named in `WARM` (trusted, import-time side-effect free, installed code): which
modules the pristine judge holds is then a choice among ours, never code or state a job chose. The names
come from the job's child, which task code controls; a name not in `WARM` is ignored, one that fails to
import is not retried.
"""
from __future__ import annotations

import importlib

WARM = frozenset({
    "numpy", "sympy", "fractions", "decimal", "statistics", "datetime", "json", "textwrap", "string", "random",
    "itertools", "functools", "collections", "heapq", "bisect", "math", "cmath", "re", "copy", "operator",
    "dataclasses", "enum", "typing", "array", "hashlib", "struct", "calendar", "unicodedata", "difflib",
})
"""Top-level modules the pristine judge may import for later jobs (import without side effects on the judge)."""


class Warm:
    """The pristine judge's record of the modules it loaded (or failed to load) for later jobs."""

    def __init__(self):
        self.tried: set[str] = set()

    def learn(self, names: list[str]) -> bool:
        """Import the `WARM` modules among `names` not tried before; whether any was."""
        new = False
        for name in {n.split(".", 1)[0] for n in names} & WARM - self.tried:
            self.tried.add(name)
            new = True
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001 - a module that does not import here is simply not warm
                pass
        return new
