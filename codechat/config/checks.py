"""Checks of settings that belong to code above the config: the modules that own them register here and
`config.io.validate` runs them, so reading a config never imports the trainer it configures.

    register_check(check_stages)     # train/stages.py: stage names and each stage's own settings
"""
from __future__ import annotations

import importlib
from typing import Callable

from codechat.config import RunConfig

Check = Callable[[RunConfig], list[str]]
CHECKS: list[Check] = []
OWNERS = ("codechat.train.stages",)
"""Modules that register checks, loaded by name on first validation (as a registry loads its plugins), so a
config read before the trainer was imported is still checked in full."""


def register_check(fn: Check) -> Check:
    """Run `fn(cfg) -> [problem, ...]` on every validated config (once, however often its module is reloaded)."""
    key = (fn.__module__, fn.__qualname__)
    CHECKS[:] = [c for c in CHECKS if (c.__module__, c.__qualname__) != key] + [fn]
    return fn


def registered_checks() -> list[Check]:
    """Every registered check, the owners' modules imported first."""
    for name in OWNERS:
        importlib.import_module(name)
    return list(CHECKS)
