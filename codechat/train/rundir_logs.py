"""A run directory's logs across restarts: truncation on --resume, and the refusal to start a second run in it.

Every log carries the metrics.jsonl step of the update that produced it (metrics.jsonl: the step just finished;
rollouts.jsonl and audit.jsonl: the step whose update used the samples, i.e. `global_step + 1` while sampling).
A checkpoint at global step N holds exactly the records with `step <= N`; on resume everything later is dropped,
because the resumed run writes it again. A run killed before its first checkpoint resumes from step 0 and so
starts with empty logs.

    truncate_logs(run_dir, state.global_step)   # --resume
    claim_run_dir(run_dir, force=False)         # a fresh run: refused if run_dir already holds one
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from codechat import CodechatError
from codechat.io.jsonl import read_records

LOGS = ("metrics.jsonl", "rollouts.jsonl", "audit.jsonl")
"""The step-numbered logs of a run directory."""
RUN_FILES = ("config.yaml", *LOGS, "checkpoints", "final", "best", "stages")
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


def claim_run_dir(run_dir: str | Path, force: bool = False) -> None:
    """A fresh run into run_dir: refused when it already holds a run (a config, a log or checkpoints); with
    force the earlier run's files are removed first (other files in the directory are left alone)."""
    run_dir = Path(run_dir)
    found = [n for n in RUN_FILES if (run_dir / n).exists() or (run_dir / n).is_symlink()]
    if not found:
        return
    if not force:
        raise CodechatError(f"{run_dir}: already holds a run ({', '.join(found)}); continue it with --resume "
                            f"{run_dir}, pick another run_dir, or replace it with --force")
    for n in found:
        p = run_dir / n
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
