"""Atomic checkpoints with the full training state, and resume.

A checkpoint is a directory `checkpoints/step-XXXXXXX/` holding the model in Hugging Face format, `trainer.pt`
(optimizer, scheduler, RNG states) and `state.json` (stage, step, data position, best metric). It is written
into `*.tmp`, every file fsynced, then renamed: a run killed at any moment, mid-save included, resumes from the
last complete checkpoint (leftover `*.tmp` directories are ignored and cleaned up). A write that fails (a full
disk: OSError, or safetensors' SafetensorError) removes its partial `*.tmp` copy and stops the run with one
line; the checkpoints written before it are never touched.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors import SafetensorError

from codechat import CodechatError
from codechat.io.rundir import update_links
from codechat.policy.fsdp import full_state_dict, is_sharded, optimizer_state
from codechat.train import dist


@dataclass
class TrainState:
    """Where a run is. Saved with every checkpoint."""

    stage_idx: int = 0
    """Index into cfg.stages of the stage in progress."""
    step: int = 0
    """Steps finished in the current stage."""
    global_step: int = 0
    """Steps finished over all stages (the x axis of metrics)."""
    data_pos: int = 0
    """Prompts consumed so far in the current stage (position in the seeded data order)."""
    samples: int = 0
    """Completions sampled so far over the run (for sample-budget comparisons)."""
    best_metric: float = -1.0
    """Best eval pass@1 seen so far."""
    best_checkpoint: str = ""
    """Name of the checkpoint holding best_metric (never deleted by rotation)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Stage-specific values (e.g. the regression baselines at the stage start)."""


WRITE_ERRORS = (OSError, RuntimeError, SafetensorError)
"""What a failed write raises: OSError (ENOSPC, EDQUOT, EIO), torch.save's RuntimeError, safetensors' error."""


def write_dir(final: Path, write: Callable[[Path], None], run_dir: Path) -> None:
    """`write(tmp)` into `final`.tmp, fsync it, rename it to `final` (replacing one of the same name); a failed
    write removes the partial copy and raises one line, leaving every other directory as it was."""
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        write(tmp)
        _fsync_tree(tmp)
        if final.exists():  # re-saving the same step (e.g. stage end right after a periodic save)
            shutil.rmtree(final)
        os.replace(tmp, final)
    except WRITE_ERRORS as e:  # e.g. ENOSPC: drop the partial copy, keep every finished one
        why = " ".join(str(e).split())[:300]  # torch.save on a full disk says only "unexpected pos ...": add the space
        free = shutil.disk_usage(final.parent).free if final.parent.is_dir() else 0  # (before the copy goes)
        shutil.rmtree(tmp, ignore_errors=True)
        raise CodechatError(f"{final}: not written ({why}; {free / 2**20:.0f} MiB were free); its partial copy is "
                            f"removed and the earlier checkpoints are intact (free some space, then codechat train "
                            f"--resume {run_dir})") from None


def _fsync_tree(path: Path) -> None:
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(s: dict) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])


class Checkpointer:
    def __init__(self, run_dir: str | Path, keep_last: int = 2):
        self.dir = Path(run_dir) / "checkpoints"
        self.keep_last = keep_last

    def list(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if p.is_dir() and p.name.startswith("step-")
                      and not p.name.endswith(".tmp") and (p / "state.json").is_file())

    def latest(self) -> Path | None:
        ckpts = self.list()
        return ckpts[-1] if ckpts else None

    def save(self, policy, state: TrainState, optimizer=None, scheduler=None, extra: dict | None = None) -> Path | None:
        """Called by every rank (under FSDP the weights and optimizer state are gathered first); rank 0 writes
        and returns the checkpoint, the others return None. extra: more picklable entries for trainer.pt (the
        asynchronous producer's batches in flight), read back from `ctx.resume`."""
        weights = full_state_dict(policy.model) if is_sharded(policy.model) else None
        opt_state = optimizer_state(policy.model, optimizer) if optimizer else None
        if not dist.is_main():
            return None
        final = self.dir / f"step-{state.global_step:07d}"

        def write(tmp: Path) -> None:
            policy.save(tmp / "model", state_dict=weights)
            torch.save({"optimizer": opt_state,
                        "scheduler": scheduler.state_dict() if scheduler else None,
                        "rng": rng_state(), **(extra or {})}, tmp / "trainer.pt")
            (tmp / "state.json").write_text(json.dumps(asdict(state), indent=1))

        write_dir(final, write, self.dir.parent)
        _fsync_tree(self.dir)
        update_links(self.dir.parent, final, state.best_checkpoint)  # RUN/final, RUN/best (codechat/io/rundir.py)
        self._rotate(state)
        return final

    def _rotate(self, state: TrainState) -> None:
        for p in self.dir.glob("*.tmp"):
            shutil.rmtree(p, ignore_errors=True)
        ckpts = self.list()
        for p in ckpts[:-self.keep_last]:
            if p.name != state.best_checkpoint:
                shutil.rmtree(p, ignore_errors=True)

    @staticmethod
    def load_state(ckpt: Path) -> tuple[TrainState, dict]:
        try:
            state = TrainState(**json.loads((ckpt / "state.json").read_text()))
            trainer = torch.load(ckpt / "trainer.pt", weights_only=False)
        except (OSError, ValueError, TypeError, RuntimeError) as e:
            raise CodechatError(f"{ckpt}: unreadable checkpoint: {e}") from None
        return state, trainer
