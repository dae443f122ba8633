"""Does the no-think share follow where thinking pays? (docs/thinking.md, "Per-prompt choice"): a mixed toy set,
the suite's short run (configs/thinking.yaml + bench/thinking_run.py's SHORT) on it, no-think share and pass@1
per half before and after.

    PYTHONPATH=. python bench/thinking_difficulty.py --out /tmp/diff --seeds 0,1

easy = builtin:toy (ten phrasings of f(x) = x + 1); its SFT data is builtin:toy-think-sft-prefilled's (thinking
references, answers after a prefilled empty block, one skip copy), so skipping costs nothing there.
hard = f(x) = x + K with K spelled out ("... plus the number seven, spelled out."), K = 2..11; its SFT data is the
thinking reference only, whose plan states K ("Plan: seven is 7. ..."), so after a forced empty block the SFT
model has never answered a hard prompt: skipping fails there. RL trains on both halves; evals: easy is data.eval,
hard data.extra_eval, both with eval.n samples per task at T = 1. Before = the SFT stage's last eval, after = the
RL stage's. Simplifies: "hard" is built to make thinking pay (both halves pass ~99% when the SFT model thinks),
not a difficulty measured by the reference's pass rate. Every run is a `codechat train` subprocess, one at a time.
Ends with one JSON line {"seeds", "easy_nothink_before", "easy_nothink_after", "hard_nothink_before", ...}.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from codechat.tasks import load_tasks

WORDS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]
"""The hard half's K = 2..11, spelled out in the prompt."""
SFT_STEPS = 250
"""SFT steps (the short run's 100 leave the hard half at ~8% even when thinking)."""
KEYS = {"nothink": "thinking/nothink_frac", "pass1": "pass@1", "tokens": "thinking/len",
        "pass1_think": "thinking/pass@1/think", "pass1_nothink": "thinking/pass@1/nothink"}


def load_short():
    spec = importlib.util.spec_from_file_location("thinking_run", Path(__file__).with_name("thinking_run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def record(task_id: str, prompt: str, tests: list[str], solution: str | None = None, meta: dict | None = None):
    return {"task_id": task_id, "prompt": prompt, "entry_point": "f", "tests": tests,
            **({"solution": solution} if solution else {}), "metadata": meta or {}}


def write_sets(out: Path) -> dict[str, Path]:
    """easy.jsonl, hard.jsonl, train.jsonl (both) and sft.jsonl in `out` (codechat JSONL) -> their paths."""
    easy = [record(t.task_id, t.prompt, t.tests) for t in load_tasks("builtin:toy")]
    hard, sft = [], []
    for t in load_tasks("builtin:toy-think-sft-prefilled"):
        sft.append(record(t.task_id, t.prompt, t.tests, t.solution,
                          {"prefill": t.metadata["prefill"]} if "prefill" in t.metadata else None))
    for i, (w, k) in enumerate(zip(WORDS, range(2, 12))):
        tid, prompt = f"hard/{i}", f"Write a function `f(x)` that returns x plus the number {w}, spelled out."
        tests = [f"assert f(0) == {k}", f"assert f(41) == {41 + k}", f"assert f(-3) == {k - 3}"]
        hard.append(record(tid, prompt, tests))
        sft.append(record(tid, prompt, tests, f"<think>Plan: {w} is {k}. Write `f`, then check the edge cases."
                                              f"</think>\ndef f(x):\n    return x + {k}\n"))
    paths = {}
    for name, rows in (("easy", easy), ("hard", hard), ("train", easy + hard), ("sft", sft)):
        paths[name] = out / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def per_half(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    before = [m for m in rows if m.get("stage") == "sft" and "eval/pass@1" in m][-1]
    after = [m for m in rows if m.get("stage") != "sft" and "eval/pass@1" in m][-1]
    out = {}
    for half, prefix in (("easy", "eval"), ("hard", "eval_hard")):
        for name, k in KEYS.items():
            for when, m in (("before", before), ("after", after)):
                if f"{prefix}/{k}" in m:  # pass@1/nothink: absent when no sample skipped
                    out[f"{half}_{name}_{when}"] = round(m[f"{prefix}/{k}"], 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the task files and runs (diff-s*/)")
    ap.add_argument("--seeds", default="0,1", help="seeds, comma-separated")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the runs")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    short, t0 = load_short(), time.perf_counter()
    sets = write_sets(args.out)
    model = short.small_model(args.out / "small-model")
    per = {}
    for s in [int(x) for x in args.seeds.split(",")]:
        run = args.out / f"diff-s{s}"
        cmd = [sys.executable, "-m", "codechat", "train", "--force", "--config", "configs/thinking.yaml",
               f"run_dir={run}", *short.COMMON, *short.SHORT, f"model.path={model}", f"seed={s}",
               f"sft.steps={SFT_STEPS}", f"data.sft={sets['sft']}", f"data.train={sets['train']}",
               f"data.eval={sets['easy']}", f"data.extra_eval=[{sets['hard']}]", *args.overrides]
        with open(run.with_suffix(".log"), "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode
        if rc != 0:
            raise SystemExit(f"a run failed (exit {rc}): see {run}.log")
        per[s] = per_half(run)
    res: dict = {"seeds": sorted(per)}
    for k in sorted({k for v in per.values() for k in v}):
        res[k] = [per[s].get(k) for s in res["seeds"]]
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
