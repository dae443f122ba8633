"""User code named in a config: reward functions and task loaders from a Python file or an importable module.

    rewards: {pass-all: 1.0, my_rewards.py:brevity: 0.1}     # FILE.py:NAME or package.module:NAME
    data: {loader: my_loader.py:load}                        # load(spec: str) -> list[Task], for data.train/eval

A reward plugin has the built-in rewards' signature `(task, completion, verdict, ctx) -> float` and is
registered in REWARDS under its spec, so the trainer, the logs and `compose_rewards` treat it as any other. A
loader is called with each task-set string of the data section (train, eval, extra_eval, sft) instead of
codechat's loaders and must return a list of `codechat.tasks.Task`.

Plugins are loaded when the config is (a missing file, a syntax error, a missing or non-callable name fail with
one line naming the spec). A fresh run copies each plugin file into `RUN/plugins/`, and a config read from a
run directory's `config.yaml` finds its files there first, so `--resume` runs the code the run started with even
if the original file changed or moved. Plugins are trusted code: they run in the trainer's process, unsandboxed.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterable

from codechat import CodechatError
from codechat.rollout.rewards import REWARDS
from codechat.tasks import Task, load_tasks
from codechat.tasks.repo_loaders import is_repo_spec, load_repo_tasks

_LOADED: dict[str, Callable] = {}
"""spec -> the object it named, for the life of the process."""


def is_spec(name: str) -> bool:
    """`FILE.py:NAME` or `module.path:NAME` (built-in names never contain a colon)."""
    return ":" in name and bool(name.rsplit(":", 1)[1])


def _file_of(spec: str) -> str | None:
    target = spec.rsplit(":", 1)[0]
    return target if target.endswith(".py") else None


def load_object(spec: str, search: Iterable[Path] = ()) -> Callable:
    """The callable `spec` names; a file is looked for in each `search` folder (by its name) before its path."""
    if spec in _LOADED:
        return _LOADED[spec]
    if not is_spec(spec):
        raise CodechatError(f"{spec}: expected FILE.py:NAME or module:NAME")
    target, name = spec.rsplit(":", 1)
    if target.endswith(".py"):
        found = [d / Path(target).name for d in search if (d / Path(target).name).is_file()] + [Path(target)]
        path = found[0]
        if not path.is_file():
            raise CodechatError(f"{spec}: no such file {path}")
        mod_name = f"codechat_plugin_{path.stem}_{abs(hash(str(path.resolve())))}"
        try:
            loader_spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[mod_name] = module
            loader_spec.loader.exec_module(module)
        except Exception as e:  # user code: any failure at import is the file's fault
            raise CodechatError(f"{spec}: cannot load {path}: {type(e).__name__}: {e}") from None
    else:
        try:
            module = importlib.import_module(target)
        except Exception as e:
            raise CodechatError(f"{spec}: cannot import {target}: {type(e).__name__}: {e}") from None
    obj = getattr(module, name, None)
    if not callable(obj):
        raise CodechatError(f"{spec}: {target} has no function {name!r}")
    _LOADED[spec] = obj
    return obj


def register_rewards(components: Iterable[str], search: Iterable[Path] = ()) -> None:
    """Load every plugin reward among the component names and register it in REWARDS under its spec."""
    for name in components:
        if not is_spec(name) or name in REWARDS:
            continue
        fn = load_object(name, search)
        got = tuple(inspect.signature(fn).parameters)
        if got != REWARDS.params:
            raise CodechatError(f"rewards: {name} takes {got}; a reward takes {REWARDS.params}")
        REWARDS.register(name)(fn)


def load_with(loader: str, path: str, fmt: str | None = None) -> list:
    """Tasks of `path`: through the configured loader plugin, else codechat's loaders."""
    if not loader:  # repository task sets (builtin:repo-family, a repo-task folder) have their own loader
        return load_repo_tasks(path) if is_repo_spec(path) else load_tasks(path, fmt)
    tasks = load_object(loader)(path)
    if not isinstance(tasks, list) or not all(isinstance(t, Task) for t in tasks):
        raise CodechatError(f"data.loader: {loader} must return a list of codechat.tasks.Task for {path!r}")
    if not tasks:
        raise CodechatError(f"data.loader: {loader} returned no task for {path!r}")
    return tasks


def plugin_files(specs: Iterable[str]) -> list[Path]:
    """The files behind file specs, as loaded (the run-dir copy when that is where they were found)."""
    out = []
    for spec in specs:
        if is_spec(spec) and _file_of(spec) and spec in _LOADED:
            out.append(Path(inspect.getfile(_LOADED[spec])))
    return out


def record(specs: Iterable[str], run_dir: str | Path) -> list[Path]:
    """Copy the plugin files into RUN/plugins/ (read first by --resume); returns the copies."""
    dest = Path(run_dir) / "plugins"
    copies = []
    for f in plugin_files(specs):
        dest.mkdir(parents=True, exist_ok=True)
        if f.resolve() != (dest / f.name).resolve():
            shutil.copy2(f, dest / f.name)
        copies.append(dest / f.name)
    return copies
