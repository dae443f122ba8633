"""A run directory used as a model: which checkpoint it means, and the prompt format it trained with.

    resolve_model("runs/x")              # -> runs/x/checkpoints/step-N/model of the final checkpoint
    resolve_model("runs/x", "best")      # -> the checkpoint with the best eval greedy pass@1
    resolve_model("runs/x/final")        # the stable links: RUN/final, RUN/best (model.path accepts them)
    run_prompt_format("runs/x/final")    # -> "raw" (model.chat: false) or "chat", from the run's config.yaml

`RUN/final` and `RUN/best` are relative symlinks to `checkpoints/step-N/model`, replaced atomically by the
checkpoint writer after every save (train/checkpoint.py calls `update_links`): `final` is the latest complete
checkpoint (at the end of a run: its last step), `best` the one with the highest eval greedy pass@1 (pass@1
when greedy is off). A run dir without the links (copied without symlinks, or older) resolves the same way from
its checkpoints' state.json. The prompt format is read from the run's resolved `config.yaml` (`model.chat`),
the file every run already writes: `raw` = the task text continued as is (`prompt_text`), `chat` = one user
turn through the tokenizer's chat template.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from codechat import CodechatError

WHICH = ("final", "best")


def is_run_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / "checkpoints").is_dir() and not (p / "config.json").is_file()


def _checkpoints(run: Path) -> list[Path]:
    d = run / "checkpoints"
    return sorted(p for p in d.iterdir() if p.is_dir() and p.name.startswith("step-")
                  and not p.name.endswith(".tmp") and (p / "state.json").is_file()) if d.is_dir() else []


def checkpoint_dir(run: str | Path, which: str = "final") -> Path:
    """The checkpoint directory (`checkpoints/step-N`) that `which` (final or best) names in run dir `run`."""
    run = Path(run)
    if which not in WHICH:
        raise CodechatError(f"checkpoint '{which}': expected one of {', '.join(WHICH)}")
    ckpts = _checkpoints(run)
    if not ckpts:
        raise CodechatError(f"{run}: run directory has no complete checkpoint")
    if which == "final":
        return ckpts[-1]
    try:
        best = json.loads((ckpts[-1] / "state.json").read_text()).get("best_checkpoint") or ""
    except (OSError, ValueError) as e:
        raise CodechatError(f"{ckpts[-1]}: unreadable state.json ({e})") from None
    if not best or not (run / "checkpoints" / best / "model").is_dir():
        raise CodechatError(f"{run}: no best checkpoint (the run had no evaluation, data.eval); use final")
    return run / "checkpoints" / best


def resolve_model(path: str, which: str = "final") -> str:
    """A run directory means its `which` checkpoint's model dir; RUN/final, RUN/best and everything else
    (presets, HF model dirs) are passed through."""
    if which not in WHICH:
        raise CodechatError(f"checkpoint '{which}': expected one of {', '.join(WHICH)}")
    p = Path(path)
    if is_run_dir(p):
        return str(checkpoint_dir(p, which) / "model")
    if p.name in WHICH and is_run_dir(p.parent) and not p.exists():  # link missing (copied without symlinks)
        return str(checkpoint_dir(p.parent, p.name) / "model")
    return path


def find_run(model_path: str | Path) -> Path | None:
    """The run directory a model path belongs to (RUN, RUN/final, RUN/best, RUN/checkpoints/step-N/model)."""
    p = Path(model_path)
    for cand in (p, p.parent, p.parent.parent.parent):
        if (cand / "config.yaml").is_file() and (cand / "checkpoints").is_dir():
            return cand
    return None


def run_config(model_path: str | Path) -> dict | None:
    """The resolved config.yaml (as a dict) of the run `model_path` belongs to; None when not from a run."""
    run = find_run(model_path)
    if run is None:
        return None
    try:
        cfg = yaml.safe_load((run / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise CodechatError(f"{run / 'config.yaml'}: unreadable ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise CodechatError(f"{run / 'config.yaml'}: expected a mapping")
    return cfg


def section(cfg: dict | None, name: str) -> dict:
    """One section of a run config dict ({} when absent)."""
    sec = (cfg or {}).get(name)
    return sec if isinstance(sec, dict) else {}


def run_prompt_format(model_path: str | Path) -> str | None:
    """`raw` or `chat`: how the run that produced `model_path` posed its tasks; None when not from a run."""
    cfg = run_config(model_path)
    if cfg is None:
        return None
    return "chat" if section(cfg, "model").get("chat") is True else "raw"


def _link(run: Path, name: str, target: Path) -> None:
    link, tmp = run / name, run / f".{name}.tmp-link"
    rel = os.path.relpath(target, run)
    if link.is_symlink() and os.readlink(link) == rel:
        return
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(rel, tmp)
    os.replace(tmp, link)  # atomic: a reader sees the old or the new target, never no link


def update_links(run: str | Path, latest: Path, best_name: str = "") -> None:
    """Point RUN/final at `latest`'s model and RUN/best at checkpoint `best_name`'s (when there is one)."""
    run = Path(run)
    _link(run, "final", latest / "model")
    if best_name and (run / "checkpoints" / best_name / "model").is_dir():
        _link(run, "best", run / "checkpoints" / best_name / "model")
