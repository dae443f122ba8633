"""Run diagnostics: metrics.jsonl always; TensorBoard and W&B when enabled and installed; the progress display
(train/progress.py: live bars on a terminal, plain lines elsewhere); `plot_run` draws the main curves to
curves.png (also `codechat plot RUN_DIR`).

W&B: `start_wandb` runs before anything of the run is written, so a missing login stops the start in one line;
the W&B run id is kept in RUN/wandb-run-id and a `--resume` continues that W&B run instead of opening a second."""
from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

from codechat import CodechatError
from codechat.config import LogConfig
from codechat.io.runlog import read_metrics  # noqa: F401 - re-exported (compare, demo)
from codechat.train.progress import ProgressDisplay


def _clean(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


WANDB_ID = "wandb-run-id"
"""The file in a run directory that names its W&B run (read by --resume)."""


def start_wandb(cfg: LogConfig, run_dir: str | Path, run_config: dict, resume: bool):
    """The W&B run of a codechat run: None when log.wandb is off or wandb is not installed (a warning says so);
    a resumed run continues the W&B run its RUN/wandb-run-id names. A start that fails is one line."""
    if not cfg.wandb:
        return None
    try:  # wandb: optional extra, imported on use
        import wandb
    except ImportError:
        warnings.warn("log.wandb=true but wandb is not installed (pip install 'codechat[wandb]'); logging to "
                      "metrics.jsonl only")
        return None
    saved = Path(run_dir) / WANDB_ID
    run_id = saved.read_text().strip() if resume and saved.is_file() else wandb.util.generate_id()
    try:
        return wandb.init(project=cfg.wandb_project, dir=str(run_dir), config=run_config, id=run_id,
                          resume="allow")
    except Exception as e:  # noqa: BLE001 -- wandb raises its own classes (UsageError, CommError, ...) and more
        why = " ".join(str(e).split())[:200] or type(e).__name__
        raise CodechatError(f"log.wandb: W&B did not start ({why}); run `wandb login` (or set WANDB_API_KEY, or "
                            f"WANDB_MODE=offline), or set log.wandb=false") from None


class MetricsLogger:
    def __init__(self, run_dir: str | Path, cfg: LogConfig, total_steps: int = 0, run_config: dict | None = None,
                 stages: list[tuple[str, int]] | None = None, wandb_run=None):
        """stages: (name, steps) of the run's stages, for the progress display (default: one bar of total_steps);
        wandb_run: from start_wandb (its id is saved for --resume)."""
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a", encoding="utf-8")
        self.total_steps, self.t0 = total_steps, time.time()
        self.tb = self.wandb = None
        self.display = ProgressDisplay(stages or [("train", total_steps)]) if cfg.progress else None
        if cfg.tensorboard:
            try:  # tensorboard: optional extra, imported on use
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:
                warnings.warn("log.tensorboard=true but tensorboard is not installed (pip install 'codechat[tensorboard]')")
        if wandb_run is not None:
            self.wandb = wandb_run
            (Path(run_dir) / WANDB_ID).write_text(f"{wandb_run.id}\n")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        rec = {"step": step, "time": round(time.time() - self.t0, 3)}
        rec.update({k: _clean(v) for k, v in metrics.items()})
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        numeric = {k: v for k, v in rec.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.tb:
            for k, v in numeric.items():
                self.tb.add_scalar(k, v, step)
        if self.wandb:
            self.wandb.log(numeric, step=step)
        if self.display is not None:
            self.display.update(rec, step)

    def close(self) -> None:
        if self.display is not None:
            self.display.close()
        self.file.close()
        if self.tb:
            self.tb.close()
        if self.wandb:
            self.wandb.finish()


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """The run's curves to RUN_DIR/curves.png (codechat/io/plotting.py)."""
    from codechat.io.plotting import plot_run as draw  # matplotlib: loaded only when a plot is drawn
    return draw(run_dir, out)
