"""New tokens per second: codechat's Sampler vs transformers' `model.generate`, same run, same model.

Both get the same P prompts x G samples (generate: each prompt repeated G times, left-padded, one batch), the
same max_new_tokens and sampling settings, the same EOS ids (both stop a sample at its first EOS), and both are
warmed up once before timing. New tokens are counted as produced: up to and including the first EOS of each
sample (generate pads after it), so neither side is credited for padding. The sides alternate (ours, hf, hf,
ours, ...) for --repeats rounds in one process; the default clock is this process's CPU time on one torch
thread, which other load on a shared machine disturbs far less than wall time.

Share of the GEMM rate: the same run times a pure matmul of the decode's shapes (one (B, in) x (in, out) product
per projection of every layer and the LM head, on the model's own weights, B = P x G rows), alternated with the
sides. A decoded token costs 2 x (projection and LM-head weights) FLOPs; attention's FLOPs (a few % at these
contexts) are not counted, which understates both sides alike. share = (tokens x FLOPs/token / time) / (GEMM
FLOPs / GEMM time): 1.0 would be a decoder that does nothing but those matmuls. Ends with one JSON line
{"ours_tok_s", "hf_tok_s", "ratio", "ours_gemm_share", "hf_gemm_share", "gemm_gflops", "clock", "repeats",
"compile", "packed_weights", "native_kernels", "compile_s", "compile_wall_s", "dtype"}. --no-packed: ours with
`sampling.packed_weights` off; --no-native: ours with `sampling.native_kernels` off (torch ops where the C functions
of policy/cattn.py run; "native_kernels" is false too where they do not build). The GEMM rate is F.linear's on
the weights as they lie, whichever way ours multiplies. --compile: ours with
`sampling.compile`; its one-off compile time, the first call's extra time at the timed settings, is compile_s on
the bench's clock and compile_wall_s in wall seconds (inductor compiles its C++ in worker processes, whose CPU
time the cpu clock does not see).

--dtype bfloat16: bf16 compute over the fp32 weights on both sides, each as its users run it. Ours: the policy
loaded with `model.compute_dtype=bfloat16`, so the sampler runs inside the policy's own bf16 autocast (bf16
oneDNN-packed weights and the lean decode step); generate: inside `torch.autocast("cpu", dtype=torch.bfloat16)`,
what HF Trainer / TRL users get with bf16=True on a CPU. The GEMM rate is then F.linear's under the same autocast
(bf16 inputs, autocast's bf16 copies of the weights). Only on CPUs with native bf16 (AVX512-bf16 or AMX), where
it is not emulated; elsewhere the bench stops with one line. Like a codechat run, the process caps oneDNN's
per-shape kernel caches (policy/precision.py), for both sides.

    PYTHONPATH=. python bench/sample_throughput.py --preset tiny -P 4 -G 8 --new 64 [--compile]
    PYTHONPATH=. python bench/sample_throughput.py --preset tiny --dtype bfloat16
    PYTHONPATH=. python bench/sample_throughput.py --preset small --tasks ../shared/data/mbpp/mbpp.jsonl
    PYTHONPATH=. python bench/sample_throughput.py --model /path/to/hf_dir --threads 2 --clock wall

Prompts: by default 8 short built-in code prompts (24-34 tokens with the presets' tokenizers); --tasks FILE
takes the first P prompts of a task file instead (MBPP: ~60 tokens).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from codechat.config import ModelConfig, SamplingConfig
from codechat.policy import Sampler, cattn, load_policy
from codechat.policy.precision import bf16_native

PROMPTS = [
    "Write a function `reverse_string(s)` that returns the string s reversed.\ndef reverse_string(s):\n",
    "def count_evens(xs):\n    \"\"\"Return how many numbers in the list xs are even.\"\"\"\n",
    "Write a function `sum_of_squares(n)` returning 1*1 + 2*2 + ... + n*n.\n",
    "def is_palindrome(s: str) -> bool:\n    \"\"\"True when s reads the same backwards, ignoring case.\"\"\"\n",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
    "Write a function `fizzbuzz(n)` that returns a list of strings for 1..n.\n",
    "def flatten(nested):\n    \"\"\"Flatten a list of lists by one level.\"\"\"\n",
    "def word_count(text):\n    \"\"\"Return a dict from each word in text to how often it occurs.\"\"\"\n",
]


def count_new(seqs: torch.Tensor, eos: set[int]) -> int:
    """New tokens up to and including each row's first EOS (all of them when there is none)."""
    total = 0
    for row in seqs.tolist():
        n = len(row)
        for i, t in enumerate(row):
            if t in eos:
                n = i + 1
                break
        total += n
    return total


CLOCK = time.process_time
LOWP = contextlib.nullcontext  # the context of generate and of the GEMM timing: bf16 autocast with --dtype bfloat16


def gemm_weights(model) -> list[torch.Tensor]:
    """Every projection's weight (out, in) of every layer, then the LM head's: the decode's matmul shapes."""
    ws = [m.weight for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in n]
    return ws + [model.get_output_embeddings().weight]


@torch.no_grad()
def run_gemm(ws, B: int, reps: int = 20) -> tuple[float, float]:
    """FLOPs and seconds of `reps` passes of one (B, in) x (in, out) matmul per weight."""
    with LOWP():
        dt = torch.get_autocast_dtype(ws[0].device.type) if torch.is_autocast_enabled(ws[0].device.type) else None
        xs = [torch.randn(B, w.shape[1], dtype=dt or w.dtype, device=w.device) for w in ws]
        for x, w in zip(xs, ws):  # under autocast: its bf16 copy of each weight, cast once, cached for the region
            F.linear(x, w)
        t0 = CLOCK()
        for _ in range(reps):
            for x, w in zip(xs, ws):
                F.linear(x, w)
    return reps * sum(2.0 * B * w.numel() for w in ws), CLOCK() - t0


def run_ours(sampler, prompts, G, cfg):
    t0 = CLOCK()
    batch = sampler.sample(prompts, G, cfg)
    return int(batch.n_tokens.sum()), CLOCK() - t0


@torch.no_grad()
def run_hf(policy, prompts, G, cfg):
    pad = policy.tokenizer.pad_token_id
    Lp = max(len(p) for p in prompts)
    rows = [p for p in prompts for _ in range(G)]
    ids = torch.tensor([[pad] * (Lp - len(p)) + p for p in rows], device=policy.device)
    attn = torch.tensor([[0] * (Lp - len(p)) + [1] * len(p) for p in rows], device=policy.device)
    torch.manual_seed(cfg.seed)
    t0 = CLOCK()
    with LOWP():
        out = policy.model.generate(
            input_ids=ids, attention_mask=attn, do_sample=cfg.temperature > 0, temperature=cfg.temperature or None,
            top_p=cfg.top_p, top_k=cfg.top_k, max_new_tokens=cfg.max_new_tokens, pad_token_id=pad,
            eos_token_id=list(policy.eos_token_ids))
    dt = CLOCK() - t0
    return count_new(out[:, Lp:], set(policy.eos_token_ids)), dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", help="preset name (tiny, small); ignored with --model")
    ap.add_argument("--model", default=None, help="local Hugging Face model directory")
    ap.add_argument("--tasks", default=None, help="task file whose first P prompts are used (e.g. MBPP)")
    ap.add_argument("-P", type=int, default=4, help="prompts")
    ap.add_argument("-G", type=int, default=8, help="samples per prompt")
    ap.add_argument("--new", type=int, default=64, help="max new tokens")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=4, help="timed runs per side, alternated (ABBA)")
    ap.add_argument("--stat", choices=["median", "best"], default="median",
                    help="summary over repeats: median, or best (each side's fastest run; steadier on a shared "
                         "machine)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads; 0 = torch's default")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="cpu",
                    help="wall time, or this process's CPU time (with --threads 1: robust to other load)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true",
                    help="ours with sampling.compile (the static-shape step under torch.compile); its compile time "
                         "is reported apart (the first call at the timed settings), not in the timed runs")
    ap.add_argument("--no-packed", action="store_true",
                    help="ours with sampling.packed_weights=false (F.linear on the weights as they lie)")
    ap.add_argument("--no-native", action="store_true",
                    help="ours with sampling.native_kernels=false (the decode step's attention, norms, SiLU and "
                         "sampling math as torch ops, not policy/cattn.py's C functions)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="compute dtype of both sides: bfloat16 = ours with model.compute_dtype=bfloat16, generate "
                         "under torch.autocast bf16 (fp32 weights on both); CPUs with native bf16 only")
    args = ap.parse_args()
    global CLOCK, LOWP
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.dtype == "bfloat16":
        if not bf16_native(args.device):
            sys.exit(f"sample_throughput: {args.device} has no native bf16 ("
                     f"{torch.backends.cpu.get_cpu_capability()}), where bf16 is emulated and slow: skipped")
        LOWP = functools.partial(torch.autocast, torch.device(args.device).type, dtype=torch.bfloat16)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    policy = load_policy(ModelConfig(path=args.model or args.preset, device=args.device,
                                     compute_dtype="" if args.dtype == "float32" else args.dtype))
    texts = PROMPTS
    if args.tasks:
        from codechat.tasks import load_tasks

        texts = [t.prompt for t in load_tasks(args.tasks)[: args.P]]
    prompts = [policy.encode_prompt(texts[i % len(texts)]) for i in range(args.P)]
    cfg = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                         max_new_tokens=args.new, seed=0, compile=args.compile,
                         packed_weights=not args.no_packed, native_kernels=not args.no_native)
    sampler = Sampler(policy)
    n_params = sum(p.numel() for p in policy.model.parameters())
    print(f"model {args.model or args.preset} ({n_params / 1e6:.1f}M params), P={args.P} G={args.G} "
          f"new={args.new} T={args.temperature} top_p={args.top_p} top_k={args.top_k} "
          f"threads={torch.get_num_threads()} clock={args.clock} prompt tokens={[len(p) for p in prompts]}")
    if args.dtype == "bfloat16":
        print("bf16 on both sides, fp32 weights: ours = Sampler with model.compute_dtype=bfloat16 (its bf16 "
              "autocast); hf generate = model.generate under torch.autocast(bfloat16); GEMM rate = F.linear under "
              "the same autocast")
    warm = SamplingConfig(**{**cfg.__dict__, "max_new_tokens": 4})
    run_ours(sampler, prompts, args.G, warm)
    run_hf(policy, prompts, args.G, warm)
    compile_s = compile_wall_s = 0.0
    if args.compile:  # the graphs of the timed settings (every batch bucket they reach), built once here
        w0 = time.perf_counter()
        _, first = run_ours(sampler, prompts, args.G, cfg)
        w1 = time.perf_counter()
        _, again = run_ours(sampler, prompts, args.G, cfg)
        compile_s, compile_wall_s = first - again, (w1 - w0) - (time.perf_counter() - w1)
        # inductor compiles its C++ in worker processes: their CPU is not this process's, so wall time too
        print(f"compile: first call {first:.1f} s, second {again:.2f} s ({args.clock}); wall {w1 - w0:.1f} s, "
              f"{time.perf_counter() - w1:.2f} s")
    ws = gemm_weights(policy.model)
    flops_tok = sum(2.0 * w.numel() for w in ws)  # per decoded token: every projection and the LM head
    B = args.P * args.G
    run_gemm(ws, B, 2)
    ours, hf, gemm = [], [], []
    sides = {"ours": lambda: run_ours(sampler, prompts, args.G, cfg),
             "hf generate": lambda: run_hf(policy, prompts, args.G, cfg)}
    for i in range(args.repeats):  # ABBA: each side goes first every other round, so load drift hits both alike
        order = ["ours", "hf generate"] if i % 2 == 0 else ["hf generate", "ours"]
        for side in order:
            n, dt = sides[side]()
            (ours if side == "ours" else hf).append(n / dt)
            print(f"{side}: {n} new tokens in {dt:.3f} s = {n / dt:.0f} tok/s")
        fl, dt = run_gemm(ws, B)
        gemm.append(fl / dt)
    pick = statistics.median if args.stat == "median" else max
    o, h, g = pick(ours), pick(hf), pick(gemm)
    print(f"pure matmul of the decode's shapes (B={B}): {g / 1e9:.1f} GFLOP/s; {flops_tok / 1e6:.2f} MFLOP per "
          f"token; share of the GEMM rate: ours {o * flops_tok / g:.2f}, hf generate {h * flops_tok / g:.2f}")
    print(json.dumps({"ours_tok_s": round(o, 1), "hf_tok_s": round(h, 1), "ratio": round(o / h, 2),
                      "ours_gemm_share": round(o * flops_tok / g, 3), "hf_gemm_share": round(h * flops_tok / g, 3),
                      "gemm_gflops": round(g / 1e9, 1), "clock": args.clock, "repeats": args.repeats,
                      "compile": args.compile, "packed_weights": not args.no_packed,
                      "native_kernels": not args.no_native and cattn.kernel() is not None,
                      "compile_s": round(compile_s, 1),
                      "compile_wall_s": round(compile_wall_s, 1), "dtype": args.dtype}))


if __name__ == "__main__":
    main()
