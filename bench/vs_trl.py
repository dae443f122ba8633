"""Benchmark: the same GRPO workload through TRL's `GRPOTrainer` and through codechat, in one run.

    python bench/vs_trl.py                 # 2 rounds of 6 steps each; ends with one JSON line
    python bench/vs_trl.py --steps 2 --keep --only trl-shipped
    python bench/vs_trl.py --rounds 4      # more alternated rounds: less sensitive to load drift

Workload: a randomly initialised Qwen2-architecture model (hidden 256, 4 layers, 4 heads, intermediate
688, tied embeddings) with a 1,024-token byte-level BPE tokenizer trained here on Python's own stdlib sources (no
downloads); 4 prompts x 8 samples x up to 64 new tokens per step, temperature 1, beta 0.04 (k3 KL to a frozen
reference), learning rate 1e-5, one optimizer step per batch; reward = the prompt + completion + the task's
asserts, judged by codechat's verifier on both sides (TRL calls it through `CodechatReward`,
codechat/integrations/trl.py: the same sandbox, the same "no code, no run" rule), so the verify work is equal.
Three systems, each in its own child process (`--child ...`), so each peak RSS (`ru_maxrss` of that child;
sandbox subprocesses are not counted for either) is its own:
- `trl-shipped`: TRL as a user runs it, GRPOConfig's defaults: gradient checkpointing on and bf16 autocast on
  (`bf16` defaults to True, through accelerate, on a CPU too);
- `trl-matched`: TRL at codechat's precision and memory plan: no gradient checkpointing, fp32 (`bf16=False`), or
  bf16 autocast when codechat runs with `model.compute_dtype=bfloat16`;
- `codechat`: codechat's GRPO stage (fp32 unless `--override model.compute_dtype=bfloat16`; the older `rl.autocast_bf16` still loads as that).
The rounds alternate the order (A B C, C B A, ...), so a drift in machine load hits all alike. Seconds/step is the
median wall time between consecutive step ends, over the steps after each run's first (warm-up: allocator,
caches, the reference copy), pooled over the rounds. The table splits a step into sample / verify / update (TRL:
its `_generate`, the reward function, the rest) and adds `cpu s`, the training process's own CPU seconds per step
(median), which a busy machine disturbs far less than wall time, and `upd cpu`, the update phase's CPU seconds.
The last line is JSON: codechat's s/step, each TRL column's, `ratio_shipped` and `ratio_matched`
(codechat / TRL, wall), `cpu_ratio_shipped` and `cpu_ratio_matched` (the same on CPU seconds), the peaks and
`peak_ratio_shipped` / `peak_ratio_matched`.

Both use the same torch thread count: one by default. On a small or shared machine, torch's OpenMP threads wait
for each other at every op and a descheduled thread costs a scheduler time slice (~4 ms) per op: with 2 threads
on 2 busy cores a 64-token decode took 14 s instead of 1 s, measuring the scheduler, not the systems. Raise
--threads on a quiet machine with cores to spare (the sandbox processes need some too). Simplified: a random
model rarely passes, so advantages are mostly zero; both systems still do the full forward/backward, the KL term
and the optimizer step. CPU only.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT_TAG = "VS_TRL_RESULT "

# (entry point, HumanEval-style prompt that the model continues, asserts)
TASKS = [
    ("add", 'def add(a, b):\n    """Return the sum of a and b."""\n', ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]),
    ("is_even", 'def is_even(n):\n    """Return True if n is even."""\n', ["assert is_even(4)", "assert not is_even(7)"]),
    ("square", 'def square(x):\n    """Return x squared."""\n', ["assert square(3) == 9", "assert square(-2) == 4"]),
    ("first", 'def first(xs):\n    """Return the first element of the list xs."""\n', ["assert first([7, 8]) == 7"]),
    ("reverse", 'def reverse(s):\n    """Return the string s reversed."""\n', ["assert reverse('abc') == 'cba'"]),
    ("maximum", 'def maximum(xs):\n    """Return the largest number in xs."""\n', ["assert maximum([1, 5, 2]) == 5"]),
    ("count_a", 'def count_a(s):\n    """Return how many times "a" occurs in s."""\n', ["assert count_a('banana') == 3"]),
    ("double", 'def double(xs):\n    """Return a list with every element of xs doubled."""\n',
     ["assert double([1, 2]) == [2, 4]"]),
]

SYSTEMS = ("trl-shipped", "trl-matched", "codechat")
"""TRL with GRPOConfig's defaults, TRL at codechat's fp32 without checkpointing, codechat."""

WORKLOAD = dict(prompts_per_step=4, group_size=8, max_new_tokens=64, beta=0.04, lr=1e-5, temperature=1.0)


# --- workload: tokenizer, model, tasks (parent) ---------------------------------------------------------------
def stdlib_corpus(max_bytes: int = 1_500_000) -> list[str]:
    """Python sources of the running interpreter's stdlib, in a fixed order, up to max_bytes."""
    import sysconfig

    root, texts, total = Path(sysconfig.get_paths()["stdlib"]), [], 0
    for p in sorted(root.glob("*.py")):
        try:
            t = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(t)
        total += len(t)
        if total >= max_bytes:
            break
    return texts


def build_tokenizer(out: Path, vocab_size: int = 1024):
    """Byte-level BPE with <|endoftext|> (eos) and <|pad|> (pad), saved as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(stdlib_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>")
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, seed: int = 0) -> Path:
    """Random Qwen2 (hidden 256, 4 layers, 4 heads, intermediate 688, tied embeddings) + tokenizer in `out`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(out)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=688, tie_word_embeddings=True,
                      max_position_embeddings=512, bos_token_id=None, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(out)
    return out


def write_tasks(path: Path) -> Path:
    """The tasks in codechat's JSONL schema (TRL's child reads the same file)."""
    with open(path, "w", encoding="utf-8") as f:
        for name, prompt, tests in TASKS:
            f.write(json.dumps({"task_id": f"bench/{name}", "prompt": prompt, "tests": tests,
                                "entry_point": name}) + "\n")
    return path


# --- children -------------------------------------------------------------------------------------------------
def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def clocks() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: all its threads, none of its subprocesses)."""
    return time.perf_counter(), time.process_time()


def deltas(ends: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Clock readings at the start and at each step end -> per-step wall and CPU seconds."""
    return [e[0] - b[0] for b, e in zip(ends, ends[1:])], [e[1] - b[1] for b, e in zip(ends, ends[1:])]


def child_trl(a: argparse.Namespace) -> dict:
    """TRL GRPOTrainer on the workload; per-step wall times from a TrainerCallback, phases by wrapping.
    a.child: trl-shipped (GRPOConfig's defaults) or trl-matched (fp32, no gradient checkpointing)."""
    sys.path.insert(0, str(REPO))
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from codechat.integrations.trl import CodechatReward

    tasks = [json.loads(ln) for ln in Path(a.tasks).read_text().splitlines() if ln.strip()]
    ds = Dataset.from_list([{"prompt": t["prompt"], "task": json.dumps(t)} for t in tasks])
    phase = {"sample_s": 0.0, "verify_s": 0.0, "sample_cpu": 0.0, "verify_cpu": 0.0}
    judge = CodechatReward(column="task")

    def pass_reward(prompts, completions, **columns):
        t0, c0 = clocks()
        out = judge(prompts=prompts, completions=completions, **columns)
        t1, c1 = clocks()
        phase["verify_s"] += t1 - t0
        phase["verify_cpu"] += c1 - c0
        return out

    ends: list[tuple[float, float]] = []  # (wall, this process's CPU) at train start and at each step end
    phases: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            ends.append(clocks())

        def on_step_begin(self, args, state, control, **kw):
            phase.update(sample_s=0.0, verify_s=0.0, sample_cpu=0.0, verify_cpu=0.0)

        def on_step_end(self, args, state, control, **kw):
            ends.append(clocks())
            phases.append(dict(phase))

    W = WORKLOAD
    n = W["prompts_per_step"] * W["group_size"]
    cfg = GRPOConfig(
        output_dir=str(Path(a.workdir) / "trl-out"), max_steps=a.steps, per_device_train_batch_size=n,
        gradient_accumulation_steps=1, num_generations=W["group_size"], max_completion_length=W["max_new_tokens"],
        temperature=W["temperature"], beta=W["beta"], learning_rate=W["lr"], lr_scheduler_type="constant",
        warmup_steps=0, max_grad_norm=1.0, use_cpu=True, report_to="none", logging_steps=1, save_strategy="no",
        seed=0, dataloader_num_workers=0, disable_tqdm=True,
        **({} if a.child == "trl-shipped" else {"bf16": codechat_bf16(a.override), "gradient_checkpointing": False}))
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(a.model)
    trainer = GRPOTrainer(model=model, reward_funcs=pass_reward, args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[StepTimer()])
    generate = trainer._generate  # TRL 1.x: tokenize, generate, decode; wrapped only to time it

    def timed_generate(*args, **kw):
        t0, c0 = clocks()
        try:
            return generate(*args, **kw)
        finally:
            t1, c1 = clocks()
            phase["sample_s"] += t1 - t0
            phase["sample_cpu"] += c1 - c0

    trainer._generate = timed_generate
    trainer.train()
    judge.close()
    steps, cpu = deltas(ends)
    for p, s, c in zip(phases, steps, cpu):
        p["update_s"] = s - p["sample_s"] - p["verify_s"]
        p["update_cpu"] = c - p.pop("sample_cpu") - p.pop("verify_cpu")
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"system": a.child, "version": trl.__version__, "bf16": cfg.bf16,
            "grad_ckpt": cfg.gradient_checkpointing, "step_s": steps, "cpu_s": cpu, "phases": phases,
            "reward_mean": statistics.fmean(rewards) if rewards else None}


def child_codechat(a: argparse.Namespace) -> dict:
    """codechat.train.train on the same workload; per-step times from the run's metrics.jsonl."""
    sys.path.insert(0, str(REPO))
    try:
        from codechat.config.io import load_config
        from codechat.train import train
        from codechat.train.metrics import MetricsLogger
        import codechat.policy  # noqa: F401  (the trainer imports these lazily; fail early and clearly)
        import codechat.verifier.verify  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"codechat child: codechat's trainer is not runnable on this checkout ({e}); "
                         "it needs codechat.train, codechat.policy and codechat.verifier.verify") from None
    import codechat

    W = WORKLOAD
    run_dir = Path(a.workdir) / "codechat-run"
    overrides = [
        f"run_dir={run_dir}", f"model.path={a.model}", "model.device=cpu", "stages=[grpo]", "seed=0",
        f"data.train={a.tasks}", f"rl.steps={a.steps}", f"rl.prompts_per_step={W['prompts_per_step']}",
        f"rl.group_size={W['group_size']}", f"rl.lr={W['lr']}", "rl.warmup=0", "rl.max_grad_norm=1.0",
        f"sampling.max_new_tokens={W['max_new_tokens']}", f"sampling.temperature={W['temperature']}",
        f"algo.kl_beta={W['beta']}", "log.progress=false", "log.plot=false", "checkpoint.every=0",
    ] + list(a.override)
    ends = [clocks()]  # then one per step: the trainer logs each step once, right after its optimizer step
    log = MetricsLogger.log

    def clocked_log(self, metrics, step):
        ends.append(clocks())
        return log(self, metrics, step)

    MetricsLogger.log = clocked_log
    import codechat.train.rl as rl

    update, update_cpu = rl.rl_update, []  # the update's CPU seconds (time/update_s is its wall time)

    def clocked_update(*args, **kw):
        c0 = time.process_time()
        try:
            return update(*args, **kw)
        finally:
            update_cpu.append(time.process_time() - c0)

    rl.rl_update = clocked_update
    train(load_config(None, overrides))
    recs = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    steps, cpu = deltas(ends)
    phases = [{k.split("/")[1]: r.get(k, 0.0) for k in ("time/sample_s", "time/verify_s", "time/update_s")}
              for r in recs]
    for p, c in zip(phases, update_cpu):
        p["update_cpu"] = c
    rewards = [r["reward_mean"] for r in recs if "reward_mean" in r]
    return {"system": "codechat", "version": codechat.__version__, "step_s": steps, "cpu_s": cpu, "phases": phases,
            "reward_mean": statistics.fmean(rewards) if rewards else None}


def child_main(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(a.threads)
    res = (child_codechat if a.child == "codechat" else child_trl)(a)
    res["threads"] = torch.get_num_threads()
    res["peak_mb"] = round(peak_mb(), 1)
    print(RESULT_TAG + json.dumps(res), flush=True)


def codechat_bf16(overrides: list[str]) -> bool:
    """Whether codechat's side runs bf16 autocast (so that TRL matched runs it too)."""
    kv = dict(o.replace(" ", "").split("=", 1) for o in overrides if "=" in o)
    return kv.get("model.compute_dtype") == "bfloat16" or kv.get("rl.autocast_bf16", "").lower() == "true"


# --- parent ---------------------------------------------------------------------------------------------------
def run_child(system: str, a: argparse.Namespace, model: Path, tasks: Path, workdir: Path) -> dict:
    workdir.mkdir(parents=True)
    log = workdir / f"{system}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", system, "--model", str(model),
           "--tasks", str(tasks), "--workdir", str(workdir), "--steps", str(a.steps), "--threads", str(a.threads)]
    cmd += [x for o in a.override for x in ("--override", o)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               WANDB_DISABLED="true")
    print(f"[vs_trl] {system}: {a.steps} steps (log: {log})", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    text = log.read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.startswith(RESULT_TAG)]
    if rc != 0 or not lines:
        tail = "\n".join(text.splitlines()[-25:])
        raise SystemExit(f"[vs_trl] {system} child failed (exit {rc}); last lines of {log}:\n{tail}")
    res = json.loads(lines[-1][len(RESULT_TAG):])
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def pooled(runs: list[dict]) -> dict:
    """One system's rounds -> median s/step and phases over every round's steps after its first; peak = max."""
    steps = [s for r in runs for s in r["step_s"][1:]]
    phases = [p for r in runs for p in r["phases"][1:]]
    cpu = [s for r in runs for s in r["cpu_s"][1:]]
    return {"s_per_step": statistics.median(steps), "cpu_s": statistics.median(cpu),
            **{k: statistics.median(p[k] for p in phases) for k in ("sample_s", "verify_s", "update_s", "update_cpu")},
            "peak_mb": max(r["peak_mb"] for r in runs), "version": runs[0]["version"],
            "reward": statistics.fmean(r["reward_mean"] or 0.0 for r in runs), "wall_s": sum(r["wall_s"] for r in runs)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="RL steps per system (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="run the systems this many times, the order reversed every other round; medians pool all")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (model, tasks, logs, runs)")
    ap.add_argument("--only", choices=SYSTEMS, help="run one system (no ratio)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in each child (see the docstring)")
    ap.add_argument("--override", action="append", default=[], help="extra codechat config override key=value")
    ap.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--tasks", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child_main(a)
    if a.steps < 2 or a.rounds < 1:
        ap.error("--steps must be at least 2 (the first step is not timed) and --rounds at least 1")

    workdir = Path(tempfile.mkdtemp(prefix="codechat-vs-trl-"))
    t0 = time.perf_counter()
    model = build_model(workdir / "model")
    tasks = write_tasks(workdir / "tasks.jsonl")
    print(f"[vs_trl] workload built in {time.perf_counter() - t0:.1f}s in {workdir}", file=sys.stderr)
    try:
        systems = [a.only] if a.only else list(SYSTEMS)
        runs: dict[str, list[dict]] = {s: [] for s in systems}
        for i in range(a.rounds):  # alternate the order so a drift in machine load hits both alike
            for s in (systems if i % 2 == 0 else systems[::-1]):
                runs[s].append(run_child(s, a, model, tasks, workdir / f"{s}-{i}"))
    finally:
        if not a.keep:
            import shutil
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{'system':<13}{'version':>9}{'s/step':>9}{'sample':>9}{'verify':>9}{'update':>9}{'peak MB':>9}"
          f"{'cpu s':>8}{'upd cpu':>8}{'reward':>8}{'wall s':>8}", file=sys.stderr)
    out = {}
    for s in systems:
        r = pooled(runs[s])
        key = s.replace("-", "_")
        out[f"{key}_s_per_step"], out[f"{key}_cpu_s"] = round(r["s_per_step"], 3), round(r["cpu_s"], 3)
        out[f"{key}_peak_mb"] = r["peak_mb"]
        out[f"{key}_update_s"], out[f"{key}_update_cpu_s"] = round(r["update_s"], 3), round(r["update_cpu"], 3)
        print(f"{s:<13}{r['version']:>9}{r['s_per_step']:>9.3f}{r['sample_s']:>9.3f}{r['verify_s']:>9.3f}"
              f"{r['update_s']:>9.3f}{r['peak_mb']:>9.0f}{r['cpu_s']:>8.3f}{r['update_cpu']:>8.3f}{r['reward']:>8.3f}"
              f"{r['wall_s']:>8.1f}", file=sys.stderr)
    final = dict(out, rounds=a.rounds)
    if len(systems) == len(SYSTEMS):
        for col in ("shipped", "matched"):
            t = f"trl_{col}"
            final[f"ratio_{col}"] = round(out["codechat_s_per_step"] / out[f"{t}_s_per_step"], 3)
            final[f"cpu_ratio_{col}"] = round(out["codechat_cpu_s"] / out[f"{t}_cpu_s"], 3)
            final[f"peak_ratio_{col}"] = round(out["codechat_peak_mb"] / out[f"{t}_peak_mb"], 3)
            final[f"update_cpu_speedup_{col}"] = round(out[f"{t}_update_cpu_s"] / out["codechat_update_cpu_s"], 3)
    if a.keep:
        print(f"[vs_trl] kept {workdir}", file=sys.stderr)
    print(json.dumps(final))


if __name__ == "__main__":
    main()
