"""A run directory's logs across restarts: truncation on --resume, and the refusal to start a second run in it.

Every log carries the metrics.jsonl step of the update that produced it (metrics.jsonl: the step just finished;
rollouts.jsonl and audit.jsonl: the step whose update used the samples, i.e. `global_step + 1` while sampling).
A checkpoint at global step N holds exactly the records with `step <= N`; on resume everything later is dropped,
because the resumed run writes it again. A run killed before its first checkpoint resumes from step 0 and so
starts with empty logs.

    truncate_logs(run_dir, state.global_step)   # --resume
    found = check_run_dir(run_dir, force)       # a fresh run: refused if run_dir already holds one (before
    clear_run_dir(run_dir, found)               # the inputs load); --force clears it once they have loaded

`--force` replaces only what looks like a codechat run (a `config.yaml` of codechat's sections), names what it
deletes, and leaves every other file in the directory alone.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import yaml

from codechat import CodechatError
from codechat.io.jsonl import read_records

LOGS = ("metrics.jsonl", "rollouts.jsonl", "audit.jsonl")
"""The step-numbered logs of a run directory."""
RUN_FILES = ("config.yaml", *LOGS, "checkpoints", "final", "best", "stages", "plugins", "curves.png", "wandb-run-id")
"""What a run leaves in its directory (a fresh run with --force removes them)."""


def truncate_logs(run_dir: str | Path, step: int) -> dict[str, int]:
    """Keep the records with step <= `step` in every log of run_dir; returns {log: records dropped}."""
    dropped = {}
    for name in LOGS:
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        recs = read_records(path, name)
        kept = [r for r in recs if isinstance(r.get("step"), int) and r["step"] <= step]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        tmp.replace(path)  # atomic: a kill here leaves either the old or the truncated log
        dropped[name] = len(recs) - len(kept)
    return dropped


WRITTEN = ("run_dir", "stages", "model", "data")
"""Sections every config.yaml that codechat writes (the resolved config) has, whatever its version."""


def _is_codechat_config(path: Path) -> bool:
    """A config.yaml that codechat wrote: a mapping with the resolved config's sections."""
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(cfg, dict) and set(WRITTEN) <= set(cfg)


def check_run_dir(run_dir: str | Path, force: bool = False) -> list[str]:
    """The run files a fresh run into run_dir would replace (empty: none). Refused when it holds a run and not
    `force`, and under `force` when it does not look like a codechat run (nothing is deleted here)."""
    run_dir = Path(run_dir)
    found = [n for n in RUN_FILES if (run_dir / n).exists() or (run_dir / n).is_symlink()]
    if not found:
        return []
    if not force:
        raise CodechatError(f"{run_dir}: already holds a run ({', '.join(found)}); continue it with --resume "
                            f"{run_dir}, pick another run_dir, or replace it with --force")
    if not _is_codechat_config(run_dir / "config.yaml"):
        raise CodechatError(f"{run_dir}: does not look like a codechat run (no codechat config.yaml beside "
                            f"{', '.join(found)}); --force replaces only codechat runs: pick another run_dir or "
                            f"remove those files yourself")
    return found


def clear_run_dir(run_dir: str | Path, found: list[str]) -> None:
    """Delete the earlier run's files `found` (check_run_dir), saying which."""
    run_dir = Path(run_dir)
    if not found:
        return
    ckpts = run_dir / "checkpoints"
    n = sum(1 for p in ckpts.iterdir() if p.is_dir()) if ckpts.is_dir() else 0
    shown = [f"checkpoints/ ({n})" if name == "checkpoints" else name for name in found]
    print(f"--force: deleting the earlier run in {run_dir}: {', '.join(shown)}", file=sys.stderr, flush=True)
    for name in found:
        p = run_dir / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def claim_run_dir(run_dir: str | Path, force: bool = False) -> None:
    """check_run_dir then clear_run_dir: a fresh run into run_dir, refused when it already holds a run."""
    clear_run_dir(run_dir, check_run_dir(run_dir, force))
