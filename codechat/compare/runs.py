"""One (method, seed) of a comparison: train to each budget in turn (the first as a fresh run, the rest as
`--resume` of the same run with longer stages), evaluate the checkpoint at each budget on every held-out task,
and keep the points in a small JSON result (OUT/results/METHOD-seedS.json) that a rerun reads instead of
training again.

    result = run_curve(out, "grpo", 0, budgets=[5120, 12800], sft="runs/x/sft", base=demo_cfg, extra=[], ev=ev)

Resumable at two levels: a finished point is never recomputed (its per-task counts are in the result), and a
training segment killed in the middle continues from its last checkpoint (every 20 steps) with `--resume`.
Simplification: wall time counts the training segments this process ran (a killed segment's lost time is not
counted); evaluation time is reported apart.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from codechat import CodechatError
from codechat.compare.plan import METHODS, PER_RL_STEP, RUN, rft_round, stage_overrides
from codechat.config import ModelConfig
from codechat.demos.demo import demo_config
from codechat.evaluation.evaluate import evaluate_policy
from codechat.policy import load_policy
from codechat.train import train
from codechat.train.checkpoint import Checkpointer
from codechat.train.metrics import read_metrics

POINT_KEYS = ("budget", "samples", "pass1", "n", "c", "g", "train_s", "tokens", "update_s")
"""Fields every point of a result has (the report reads them)."""

EVAL_SEED = 99
"""Seed of every compare evaluation: the same held-out samples' randomness for every method, seed and budget."""


@dataclass
class Evaluator:
    """The held-out evaluation of every point: tasks, a verifier, the demo's eval settings (n, temperature)."""

    tasks: list
    """Held-out tasks, in a fixed order (the per-task counts of a result follow it)."""
    verifier: object
    """A Verifier (open for the whole comparison)."""
    cfg: object
    """The demo's RunConfig (eval.n, eval.k, eval.temperature, sampling)."""

    def __call__(self, model_path: str) -> dict:
        """pass@1 (T = eval.temperature), greedy pass@1, pass@k and per-task counts of one model."""
        e = self.cfg.eval
        t0 = time.perf_counter()
        rep = evaluate_policy(load_policy(ModelConfig(path=model_path)), self.verifier, self.tasks, n=e.n,
                              ks=list(e.k), temperature=e.temperature, greedy=True, sampling=self.cfg.sampling,
                              seed=EVAL_SEED)
        ids = [t.task_id for t in self.tasks]
        pt = rep.per_task
        return {"pass1": rep.metrics["pass@1"], "greedy": rep.metrics.get("greedy_pass@1"),
                "passk": {k: v for k, v in rep.metrics.items() if k.startswith("pass@") and k != "pass@1"},
                "n": e.n, "c": [pt.get(i, {}).get("c", 0) for i in ids],
                "g": [int(bool(pt.get(i, {}).get("greedy", False))) for i in ids],
                "eval_s": round(time.perf_counter() - t0, 1)}


@dataclass
class Result:
    """What a (method, seed) run has measured so far; saved as OUT/results/METHOD-seedS.json."""

    method: str
    """Key of METHODS."""
    seed: int
    """The run's seed (data order, sampling); evaluation uses EVAL_SEED."""
    overrides: list[str]
    """Every `codechat train` override of the run (method, stage lengths excluded, preset, user)."""
    budgets: list[int]
    """The curve's budgets (sampled completions)."""
    tasks: list[str]
    """Held-out task ids, the order of each point's `c` and `g`."""
    points: list[dict] = field(default_factory=list)
    """One per budget reached: budget, samples, pass1, greedy, passk, n, c (passes of n per task), g (greedy
    passes), eval_s, and the training cost so far: train_s, tokens, update_s, clip, zero_var, group_std."""

    @property
    def finished(self) -> bool:
        return len(self.points) == len(self.budgets)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.__dict__, separators=(",", ":")))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Result":
        try:
            res = cls(**json.loads(path.read_text()))
            problem = res.problem()
        except (OSError, ValueError, TypeError, AttributeError) as e:
            problem = str(e)
        if problem:
            raise CodechatError(f"{path}: unreadable compare result ({' '.join(str(problem).split())}); delete it to run again")
        return res

    def problem(self) -> str | None:
        """What is wrong with a loaded result's shape (None when nothing): the report indexes these fields."""
        if not (isinstance(self.points, list) and isinstance(self.tasks, list) and isinstance(self.budgets, list)):
            return "points, tasks and budgets must be lists"
        if len(self.points) > len(self.budgets):
            return f"{len(self.points)} points for {len(self.budgets)} budgets"
        for i, p in enumerate(self.points):
            if not isinstance(p, dict) or any(k not in p for k in POINT_KEYS):
                return f"point {i} lacks one of {', '.join(POINT_KEYS)}"
            c, g, n = p["c"], p["g"], p["n"]
            if not (isinstance(c, list) and isinstance(g, list) and isinstance(n, int) and n >= 1
                    and len(c) == len(g) == len(self.tasks) and all(isinstance(x, int) and 0 <= x <= n for x in c)
                    and all(x in (0, 1) for x in g)):
                return f"point {i}: c and g must have one count in 0..n per task ({len(self.tasks)} tasks)"
        return None


def result_path(out: Path, method: str, seed: int) -> Path:
    return out / "results" / f"{method}-seed{seed}.json"


def checkpoint_samples(run_dir: Path) -> tuple[int, str | None]:
    """(samples, model dir) of the run's latest checkpoint; (0, None) when it has none."""
    latest = Checkpointer(run_dir).latest() if (run_dir / "checkpoints").is_dir() else None
    if latest is None:
        return 0, None
    return json.loads((latest / "state.json").read_text())["samples"], str(latest / "model")


def train_cost(run_dir: Path) -> dict:
    """Cost and diagnostics from metrics.jsonl so far: tokens sampled (rollouts), update seconds, mean clip
    fraction (low + high), zero-variance share and group reward std over RL steps."""
    tokens, update_s, last = 0.0, 0.0, 0
    clip, zv, gstd = [], [], []
    for r in read_metrics(run_dir):
        s = r.get("samples", last)
        if "response_len_mean" in r:
            tokens += r["response_len_mean"] * (s - last)
        last = s
        update_s += r.get("time/update_s", 0.0)
        if "clip_frac_low" in r:
            clip.append(r["clip_frac_low"] + r.get("clip_frac_high", 0.0))
        if "zero_var_frac" in r:
            zv.append(r["zero_var_frac"])
        if "group_std_mean" in r:
            gstd.append(r["group_std_mean"])

    def mean(xs):
        return sum(xs) / len(xs) if xs else None
    return {"tokens": int(tokens), "update_s": round(update_s, 1), "clip": mean(clip), "zero_var": mean(zv),
            "group_std": mean(gstd)}


def train_segment(run_dir: Path, fresh: list[str], lengths: list[str]) -> float:
    """Train the run up to the stage lengths `lengths`: a fresh run, or `--resume` of the one in run_dir
    (a finished segment or an interrupted one). Returns the wall seconds."""
    t0 = time.perf_counter()
    if (run_dir / "config.yaml").is_file():
        train(resume=run_dir, overrides=lengths)
    else:
        train(demo_config(str(run_dir), overrides=[*fresh, *lengths]), force=True)
    return time.perf_counter() - t0


def run_curve(out: Path, method: str, seed: int, budgets: list[int], sft: str, base, extra: list[str],
              ev: Evaluator, log=print) -> Result:
    """Train (method, seed) to each budget and evaluate there; skip what OUT/results already holds."""
    path = result_path(out, method, seed)
    fresh = [*METHODS[method], f"model.path={sft}", f"seed={seed}", *extra, *RUN]  # RUN last: it must hold
    ids = [t.task_id for t in ev.tasks]
    res = Result(method, seed, fresh, list(budgets), ids)
    if path.is_file():
        old = Result.load(path)
        if (old.overrides, old.tasks) != (res.overrides, res.tasks) or old.budgets[:len(old.points)] != \
                budgets[:len(old.points)]:
            raise CodechatError(f"{path}: results of other settings (overrides, tasks or budgets differ); "
                                f"use another --out or delete it")
        res.points = old.points
    if res.finished:
        log(f"compare: {method} seed {seed}: done ({path})")
        return res
    run_dir = out / "runs" / f"{method}-seed{seed}"
    train_s = res.points[-1]["train_s"] if res.points else 0.0
    for b in budgets[len(res.points):]:
        lengths = stage_overrides(method, b, base)
        have, _ = checkpoint_samples(run_dir)
        expect = expected_samples(method, b, base)
        if have < expect:
            log(f"compare: {method} seed {seed}: training to {b} completions ({' '.join(lengths)}) -> {run_dir}")
            train_s += train_segment(run_dir, fresh, lengths)
        have, model = checkpoint_samples(run_dir)
        if have != expect or model is None:
            raise CodechatError(f"{run_dir}: its latest checkpoint has {have} samples, expected {expect}; "
                                f"delete the run directory and {path} to run it again")
        point = {"budget": b, "samples": have, **ev(model), "train_s": round(train_s, 1), **train_cost(run_dir)}
        res.points.append(point)
        res.save(path)
        log(f"compare: {method} seed {seed} @ {have} completions: pass@1 {point['pass1']:.3f} "
            f"greedy {point['greedy']:.3f} (train {train_s / 60:.1f} min, eval {point['eval_s']:.0f} s)")
    return res


def expected_samples(method: str, budget: int, base) -> int:
    """Completions the method has sampled when its stages have the lengths of `budget`."""
    n = int(stage_overrides(method, budget, base)[0].split("=")[1])
    if method == "rft":
        return n * rft_round(base)
    return n * PER_RL_STEP + (rft_round(base) if method == "rft-grpo" else 0)
