"""Sampling throughput with a bound on rows decoded at once: static chunks vs continuous batching.

With at most S rows in flight (memory: KV cache, activations), the static way is to sample the P x n rows in
chunks of S rows, each chunk decoding until its slowest row ends; continuous batching (`rollout.max_rows=S`)
refills a finished group's slots from the next prompt instead. Both produce the same samples (same seed,
tests/test_sampler.py); the full static batch (all rows at once, no bound) is reported for reference. Lengths
vary through a stop string. Ends with one JSON line {"chunked_s", "continuous_s", "full_s", "tokens",
"ratio" (chunked / continuous seconds), ...}, the median of --repeats runs each.

    PYTHONPATH=. python bench/continuous_batching.py                  # tiny model, 16 prompts x 4, S=16
    PYTHONPATH=. python bench/continuous_batching.py --rows 8 --new 96

Simplifies: CPU; the chunked baseline shares the sampler's row dropping (a chunk's finished rows stop costing
compute), so on CPU the gain is the wider batch kept busy, not idle slots; on a GPU, where a step costs about
the same for 8 or 64 rows, idle slots are the waste continuous batching removes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from codechat.config import ModelConfig, SamplingConfig
from codechat.policy import Sampler, load_policy
from codechat.tasks import load_tasks


def timed(fn, repeats: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tasks", default="builtin:synthetic-train")
    ap.add_argument("-P", type=int, default=16)
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--rows", type=int, default=16, help="S: rows decoded at once")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--stop", default="\n\n")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    pol = load_policy(ModelConfig(path=a.model, device="cpu"))
    prompts = [pol.encode_prompt(t.prompt) for t in load_tasks(a.tasks)[:a.P]]
    cfg = SamplingConfig(max_new_tokens=a.new, seed=1, stop=[a.stop] if a.stop else [])
    per = max(1, a.rows // a.n)  # prompts per static chunk

    def chunked():
        return [Sampler(pol).sample(prompts[i:i + per], a.n, cfg) for i in range(0, len(prompts), per)]

    chunk_s, chunks = timed(chunked, a.repeats)
    cont_s, cont = timed(lambda: Sampler(pol, max_rows=a.rows).sample(prompts, a.n, cfg), a.repeats)
    full_s, full = timed(lambda: Sampler(pol).sample(prompts, a.n, cfg), a.repeats)
    tokens = int(full.n_tokens.sum())
    same = torch.equal(cont.n_tokens, full.n_tokens) and cont.texts == full.texts
    print(json.dumps({"chunked_s": round(chunk_s, 3), "continuous_s": round(cont_s, 3), "full_s": round(full_s, 3),
                      "tokens": tokens, "rows": a.rows, "prompts": a.P, "n": a.n, "same_samples": same,
                      "len_min": int(full.n_tokens.min()), "len_max": int(full.n_tokens.max()),
                      "ratio": round(chunk_s / cont_s, 3), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
