"""Run diagnostics: metrics.jsonl always; TensorBoard and W&B when enabled and installed; the progress display
(train/progress.py: live bars on a terminal, plain lines elsewhere); `plot_run` draws the main curves to
curves.png (also `codechat plot RUN_DIR`)."""
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


class MetricsLogger:
    def __init__(self, run_dir: str | Path, cfg: LogConfig, total_steps: int = 0, run_config: dict | None = None,
                 stages: list[tuple[str, int]] | None = None):
        """stages: (name, steps) of the run's stages, for the progress display (default: one bar of total_steps)."""
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
        if cfg.wandb:
            try:  # wandb: optional extra, imported on use
                import wandb
                self.wandb = wandb.init(project=cfg.wandb_project, dir=str(run_dir), config=run_config or {})
            except ImportError:
                warnings.warn("log.wandb=true but wandb is not installed (pip install 'codechat[wandb]')")

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
