"""Learning when not to think, on a CPU (docs/thinking.md): SFT on references that always think, then GRPO with
the constrained no-think objective from that SFT model, one RL run per seed; before = the SFT model, after = the
RL model, both evaluated on the held-out set with the same eval settings and seed.

    PYTHONPATH=. python bench/thinking_run.py --out /tmp/think                    # SFT once, RL seeds 0 1 2
    PYTHONPATH=. python bench/thinking_run.py --out /tmp/think --sft-dir /tmp/think/sft rl.steps=30
    PYTHONPATH=. python bench/thinking_run.py --summarize /tmp/think              # the JSON line of finished runs
    PYTHONPATH=. python bench/thinking_run.py --out /tmp/think --toy              # the old toy run only
    PYTHONPATH=. python bench/thinking_run.py --out /tmp/short --short            # the suite's short run, seeds 0 1 2
    PYTHONPATH=. python bench/thinking_run.py --summarize /tmp/short --short      # its JSON line again
    PYTHONPATH=. python bench/thinking_run.py --out /tmp/tags --short --single-tags  # <think>, </think> one token each

Every run is `codechat train --config configs/thinking.yaml` (a subprocess with OMP_NUM_THREADS=1; at most
--parallel at once); extra KEY=VALUE arguments go to the RL runs. "Before" is each RL run's `ref_eval/...` (the
policy at the RL start = the SFT model, evaluated by train/thinking.py before the first update); "after" is the
RL stage's last `eval/...`. Both sample freely (no forcing) at eval.temperature. Figures: no-think share, mean
response tokens (thinking included) and sampled pass@1, per seed and averaged; greedy pass@1 too.
Ends with one JSON line {"seeds", "nothink_before", "nothink_after", "tokens_before", "tokens_after",
"pass1_before", "pass1_after", "greedy_before", "greedy_after", "tokens_change", "pass1_change_pts", ...}.
Simplifies: one SFT model (seed 0) for every RL seed, so the seeds vary RL only; a failed run stops the bench.
--short runs tests/test_thinking_run.py's short run (SHORT: SFT and RL in one run of a small model on the toy
task) once per seed, and adds the CPU seconds of all of them ("cpu_s", the children's user + system time).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from codechat.policy import build_preset
from codechat.policy.presets import save_tokenizer
from codechat.io.rundir import resolve_model

SFT = [["stages=[sft]", "data.sft=builtin:synthetic-sft-think", "sft.steps=160", "sft.lr=3e-3",
        "sft.batch_size=16", "sft.warmup=10"],
       ["stages=[sft]", "data.sft=builtin:synthetic-sft-think-prefilled", "sft.steps=150", "sft.lr=2e-3",
        "sft.batch_size=16", "sft.warmup=10"]]
"""The demo's SFT, two runs (the second from the first's model): thinking traces only, then with the prefilled
copies (how the measured model was made; configs/thinking.yaml otherwise)."""
TOY = ["model.path=tiny", "data.sft=builtin:toy-think-sft-prefilled", "data.train=builtin:toy", "data.eval=builtin:toy",
       "sampling.max_new_tokens=56", "sft.steps=80", "sft.lr=3e-3", "sft.batch_size=16", "sft.warmup=5",
       "verifier.workers=2", "verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5",
       "verifier.thinking.is_weight_floor=1.0", "verifier.thinking.free_frac=0.25", "rewards.nothink_ref_steps=3",
       "rewards.components={pass-all: 1.0, nothink-bonus: 0.3}", "rewards.nothink_margin=0.05",
       "rewards.nothink_lr=1.0", "algo.advantage=grpo", "algo.loss=ppo-clip", "rl.steps=10", "rl.lr=3e-4",
       "rl.prompts_per_step=5", "rl.group_size=8", "rl.zero_variance=skip", "eval.n=4", "eval.greedy=false",
       "log.audit=false", "stages=[sft,grpo]", "seed=0"]
"""--toy: the first short run (the tiny preset, toy task, SFT 80 steps then 10 RL steps; ~7-9 min on the shared
2-core machine, too long for the suite): SFT and RL in one run, before/after as for the seeds."""
SMALL = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2, "intermediate_size": 128}
"""The short run's model: the tiny preset's tokenizer (the same tokens as the CPU demo's) under a 0.34M-parameter
Llama, ~7x cheaper per token than tiny."""
SHORT = ["data.sft=builtin:toy-think-sft-cold", "data.train=builtin:toy", "data.eval=builtin:toy",
         "sampling.max_new_tokens=60", "sft.steps=100", "sft.lr=1e-2", "sft.warmup=5", "rl.steps=16", "rl.lr=1e-3",
         "rl.prompts_per_step=4", "rewards.nothink_ref_steps=2", "eval.n=32", "eval.greedy=false",
         "verifier.workers=2", "log.audit=false"]
"""--short and tests/test_thinking_run.py: configs/thinking.yaml's stages, objective and sampling with these sizes
(60 new tokens: a thinking answer is ~52), the eval set = the training set (the mechanism, not generalisation)."""
COMMON = ["log.progress=false", "log.plot=false", "checkpoint.every=0", "eval.every=0", "model.device=cpu"]
TAGS = ("<think>", "</think>")
"""configs/thinking.yaml's tags, added whole by --single-tags."""
KEYS = {"nothink": "thinking/nothink_frac", "tokens": "thinking/len", "pass1": "pass@1", "greedy": "greedy_pass@1",
        "malformed": "thinking/malformed_frac"}


def train(run_dir: Path, overrides: list[str], config: str | None = "configs/thinking.yaml") -> subprocess.Popen:
    cmd = [sys.executable, "-m", "codechat", "train", "--force", *(["--config", config] if config else []),
           f"run_dir={run_dir}", *COMMON, *overrides]
    print(" ".join(cmd[1:]), file=sys.stderr)
    log = open(run_dir.with_suffix(".log"), "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})


def wait_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.wait() != 0:
            run = next(a for a in p.args if a.startswith("run_dir=")).split("=", 1)[1]
            raise SystemExit(f"a run failed (exit {p.returncode}): see {run}.log")


def before_after(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    first = next(m for m in rows if any(k.startswith("ref_eval/") for k in m))
    last = [m for m in rows if "eval/pass@1" in m][-1]
    out = {}
    for name, k in KEYS.items():
        if f"ref_eval/{k}" in first and f"eval/{k}" in last:  # greedy_pass@1: absent with eval.greedy=false
            out[f"{name}_before"] = first[f"ref_eval/{k}"]
            out[f"{name}_after"] = last[f"eval/{k}"]
    out["steps"] = last["step"]
    return out


def rl_evaluated(run_dir: Path) -> bool:
    """Whether the RL stage has made its final eval: an `eval/` row at or after the `ref_eval/` one (a --short run's
    SFT stage ends with an eval of its own)."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    ref = next((i for i, m in enumerate(rows) if "ref_eval/pass@1" in m), None)
    return ref is not None and any("eval/pass@1" in m for m in rows[ref:])


def small_model(out: Path, single_tags: bool = False) -> Path:
    """The short run's model, built once into `out` (a few seconds: the tokenizer is trained from the corpus).
    `single_tags`: `<think>` and `</think>` added to the tokenizer as one token each (as Qwen3 and R1-style
    tokenizers have them), the embedding grown to match."""
    if not (out / "model.safetensors").is_file():
        build_preset("tiny", out, **SMALL)
        if single_tags:
            tok, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)
            tok.add_tokens(list(TAGS))
            model.resize_token_embeddings(len(tok))
            model.save_pretrained(out)
            save_tokenizer(tok, out)
    return out


def summarize(out: Path, prefix: str = "rl-s") -> dict:
    runs = sorted(p for p in out.glob(f"{prefix}*") if p.is_dir() and (p / "metrics.jsonl").is_file())
    unfinished = [p for p in runs if not rl_evaluated(p)]
    if unfinished:  # still running, or stopped before its final evaluation
        print(f"left out, no final evaluation yet: {', '.join(p.name for p in unfinished)}", file=sys.stderr)
    per = {int(p.name.removeprefix(prefix)): before_after(p) for p in runs if p not in unfinished}
    if not per:
        raise SystemExit(f"{out}: no finished RL run ({prefix}*/metrics.jsonl with a final eval)")
    res: dict = {"seeds": sorted(per)}
    for k in next(iter(per.values())):
        res[k] = [round(per[s][k], 4) for s in res["seeds"]]
    mean = {k: statistics.mean(v) for k, v in res.items() if k != "seeds"}
    res["tokens_change"] = round(mean["tokens_after"] / mean["tokens_before"] - 1, 4)
    res["pass1_change_pts"] = round(100 * (mean["pass1_after"] - mean["pass1_before"]), 2)
    if "greedy_after" in mean:  # absent with eval.greedy=false (--short)
        res["greedy_change_pts"] = round(100 * (mean["greedy_after"] - mean["greedy_before"]), 2)
    res["nothink_mean_after"] = round(mean["nothink_after"], 4)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder of the runs (sft0/, sft1/, rl-s0/, ...)")
    ap.add_argument("--sft-dir", type=Path, help="reuse this finished SFT run instead of training one")
    ap.add_argument("--seeds", default="0,1,2", help="RL seeds, comma-separated")
    ap.add_argument("--parallel", type=int, default=2, help="RL runs at once (one thread each)")
    ap.add_argument("--summarize", type=Path, metavar="OUT", help="only print the figures of finished runs in OUT")
    ap.add_argument("--toy", action="store_true", help="only the old toy run (SFT + RL, defaults + TOY) in OUT/toy")
    ap.add_argument("--short", action="store_true", help="the suite's short run (configs/thinking.yaml + SHORT, a "
                    "small model) per seed in OUT/short-s*")
    ap.add_argument("--single-tags", action="store_true", help="with --short: <think> and </think> one token each "
                    "(the model in OUT/small-model-tags)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the RL runs")
    args = ap.parse_args()
    if args.summarize:
        print(json.dumps(summarize(args.summarize, "short-s" if args.short else "rl-s")))
        return
    if args.out is None:
        ap.error("give --out (or --summarize)")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.toy:
        wait_all([train(args.out / "toy", TOY + args.overrides, config=None)])
        print(json.dumps({**before_after(args.out / "toy"), "wall_s": round(time.perf_counter() - t0, 1)}))
        return
    if args.short:
        model = small_model(args.out / ("small-model-tags" if args.single_tags else "small-model"), args.single_tags)
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        seeds = [int(s) for s in args.seeds.split(",")]
        for i in range(0, len(seeds), args.parallel):
            wait_all([train(args.out / f"short-s{s}", [*SHORT, f"model.path={model}", f"seed={s}", *args.overrides])
                      for s in seeds[i:i + args.parallel]])
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = summarize(args.out, prefix="short-s")
        res["cpu_s"] = round(cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(res))
        return
    sft = args.sft_dir
    if sft is None:
        model = "tiny"
        for i, over in enumerate(SFT):
            sft = args.out / f"sft{i}"
            wait_all([train(sft, over + [f"model.path={model}", "seed=0"])])
            model = resolve_model(str(sft))
    model = resolve_model(str(sft))
    seeds = [int(s) for s in args.seeds.split(",")]
    for i in range(0, len(seeds), args.parallel):
        wait_all([train(args.out / f"rl-s{s}", ["stages=[grpo]", f"model.path={model}", f"seed={s}",
                                                *args.overrides]) for s in seeds[i:i + args.parallel]])
    res = summarize(args.out)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
