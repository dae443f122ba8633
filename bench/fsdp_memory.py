"""Training-state memory per rank: dist.parallel=fsdp against ddp, same model, same step, 2 ranks (gloo, CPU).

Counts the bytes each rank holds in parameters, gradients and AdamW states after one optimizer step (local
shards under FSDP), which is what decides whether a model fits a device; also the process's peak RSS and the
step time (FSDP gathers each layer in the forward and again in the backward: slower, by design).

    PYTHONPATH=. python bench/fsdp_memory.py                      # small preset (27.8M), 2 ranks
    PYTHONPATH=. python bench/fsdp_memory.py --preset tiny --world 4

Ends with one JSON line: {"ddp_state_mb": .., "fsdp_state_mb": .., "ratio": fsdp/ddp, ...}.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def local_bytes(t) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def rank_main(rank: int, world: int, port: int, mode: str, preset: str, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from codechat.config import DistConfig, ModelConfig
    from codechat.policy import fsdp, load_policy
    from codechat.train import dist

    dist.init(DistConfig(backend="gloo"))
    torch.manual_seed(0)
    model = load_policy(ModelConfig(path=preset, device="cpu")).model
    dist.broadcast_params(model)
    if mode == "fsdp":
        fsdp.shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(3, model.config.vocab_size, (2, 128), generator=torch.Generator().manual_seed(rank))
    model.train()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        (model(input_ids=ids, labels=ids).loss / world).backward()
        dist.sync_grads(model)  # ddp: the all-reduce; fsdp: done by the hooks already
        opt.step()
        times.append(time.perf_counter() - t0)
    params = sum(local_bytes(p) for p in model.parameters())
    grads = sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    states = sum(local_bytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MB (Linux reports KB)
    with open(Path(out) / f"{mode}-{rank}.json", "w") as f:
        json.dump({"params": params, "grads": grads, "adam": states, "rss_mb": rss, "step_s": min(times[1:])}, f)
    dist.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(mode: str, world: int, preset: str, out: str) -> dict:
    mp.start_processes(rank_main, args=(world, free_port(), mode, preset, out), nprocs=world, start_method="spawn")
    ranks = [json.loads((Path(out) / f"{mode}-{r}.json").read_text()) for r in range(world)]
    mb = lambda k: max(r[k] for r in ranks) / 2**20  # noqa: E731  (the fullest rank decides what fits)
    return {"params_mb": mb("params"), "grads_mb": mb("grads"), "adam_mb": mb("adam"),
            "state_mb": mb("params") + mb("grads") + mb("adam"), "peak_rss_mb": max(r["rss_mb"] for r in ranks),
            "step_s": max(r["step_s"] for r in ranks)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small", help="built-in preset or local model directory")
    ap.add_argument("--world", type=int, default=2, help="ranks (processes)")
    args = ap.parse_args()
    from codechat.policy import preset_dir
    preset_dir(args.preset) if args.preset in ("tiny", "small") else None  # build the preset once, not per rank
    with tempfile.TemporaryDirectory() as out:
        res = {m: measure(m, args.world, args.preset, out) for m in ("ddp", "fsdp")}
    for m, r in res.items():
        print(f"{m:5s} per rank: params {r['params_mb']:.1f} MB, grads {r['grads_mb']:.1f} MB, AdamW "
              f"{r['adam_mb']:.1f} MB = {r['state_mb']:.1f} MB; peak RSS {r['peak_rss_mb']:.0f} MB; "
              f"step {r['step_s'] * 1e3:.0f} ms")
    d, f = res["ddp"], res["fsdp"]
    print(json.dumps({"preset": args.preset, "world": args.world, "ddp_state_mb": round(d["state_mb"], 2),
                      "fsdp_state_mb": round(f["state_mb"], 2), "ratio": round(f["state_mb"] / d["state_mb"], 3),
                      "ddp_peak_rss_mb": round(d["peak_rss_mb"]), "fsdp_peak_rss_mb": round(f["peak_rss_mb"]),
                      "ddp_step_s": round(d["step_s"], 3), "fsdp_step_s": round(f["step_s"], 3)}))


if __name__ == "__main__":
    main()
