"""Data-parallel training across processes started by torchrun: every rank holds the whole model, samples its
slice of each step's prompts, and the gradients are summed so that the update equals the one-process update on
all the prompts.

    torchrun --nproc_per_node 8 -m codechat train --config configs/grpo.yaml           # one node, 8 GPUs
    torchrun --nnodes 2 --node_rank R --master_addr HOST --nproc_per_node 8 -m codechat train ...

How the one-process update is kept exact (tests/test_dist.py checks it: 2 ranks x B prompts == 1 rank x 2B):
- prompts are taken from the seeded order at global positions, then `shard`ed: whole prompts, so every group
  (a prompt's G samples) lives on one rank and its statistics are the group's own;
- advantages that look at the whole batch (std_scale=batch, batch-mean) see the whole batch: `batch_advantages`
  gathers the rewards of every rank first;
- the loss is normalised by the *global* count the aggregation divides by (tokens for token-mean, sequences for
  the seq-mean modes): each micro-batch's loss is weighted by `units(micro) / all_sum(units(minibatch))` and the
  gradients are summed (`sync_grads`). A mean of per-rank means would weigh a rank's tokens by its batch size.
  The same weighting makes gradient accumulation equal the full minibatch in one process too.
- `rl.minibatch_size` counts samples over all ranks: `minibatch_plan` cuts one permutation of the global rows
  (the same seed on every rank) into minibatches, and each rank trains on its rows of each; the number of
  optimizer steps and what each step sees do not depend on the world size (grad_norm: of the summed gradient);
- difficulty weights are normalised over the samples of all ranks (`mean_one`), the tracker updated with every
  rank's pass results (`all_items`), so every rank holds the same rates;
- parameters are broadcast from rank 0 at the start; all ranks then apply identical updates.
Logs, metrics.jsonl, rollouts.jsonl, checkpoints and the stage-start copy are written by rank 0 only (metrics are
means over ranks, sample counts sums). Resume works on any world size: the data position is global.

Simplifications: no torch DDP wrapper - the gradients are all-reduced once per optimizer step, in flat buckets,
after the last micro-batch (no overlap of communication with the backward pass; in RL the step is dominated by
sampling), which keeps the fast log-prob path (fastlm.py) usable and lets ranks run different numbers of
micro-batches. Each rank evaluates the whole eval set (identical results, no speed-up). Sampling randomness
depends on the world size (each rank draws its own samples), so runs on 1 and 8 ranks differ in their samples.
With `dist.parallel: fsdp` the model is sharded after loading (codechat/policy/fsdp.py): the same losses and
weights, but FSDP reduce-scatters the gradients itself (`sync_grads` is then a no-op), every rank runs the same
number of forward/backward passes, and sampling runs on weights gathered for the occasion.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Any, Sequence

import torch
import torch.distributed as tdist

from codechat import CodechatError
from codechat.algos import compute_advantages
from codechat.algos.aggregation import turn_starts
from codechat.policy.fsdp import is_sharded


def world() -> int:
    return tdist.get_world_size() if tdist.is_initialized() else 1


def rank() -> int:
    return tdist.get_rank() if tdist.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def local_world() -> int:
    """Ranks on this node (torchrun's LOCAL_WORLD_SIZE)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if tdist.is_initialized() else 1


def init(cfg) -> bool:
    """Join the process group when started by torchrun (WORLD_SIZE > 1) and none exists yet; True when this call
    created it (the caller then `close`s it). `cfg`: DistConfig."""
    if tdist.is_initialized():
        return False
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = cfg.backend if cfg.backend != "auto" else "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # then device "cuda" means this rank's GPU
    tdist.init_process_group(backend, timeout=datetime.timedelta(seconds=cfg.timeout_s))
    return True


def close() -> None:
    if tdist.is_initialized():
        tdist.destroy_process_group()


def _dev() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if tdist.get_backend() == "nccl" else torch.device("cpu")


def _reduce(x: float, op) -> float:
    if not tdist.is_initialized():
        return x
    t = torch.tensor([float(x)], dtype=torch.float64, device=_dev())
    tdist.all_reduce(t, op)
    return float(t.item())


def all_sum(x: float) -> float:
    return _reduce(x, tdist.ReduceOp.SUM)


def all_max(x: float) -> float:
    return _reduce(x, tdist.ReduceOp.MAX)


def any_true(flag: bool) -> bool:
    """True on every rank when it is true on some rank (keeps loops in step across ranks)."""
    return bool(all_max(1.0 if flag else 0.0))


def barrier() -> None:
    if tdist.is_initialized():
        tdist.barrier()


def gather(obj: Any) -> list[Any]:
    """Every rank's `obj` (picklable), in rank order, on every rank."""
    if not tdist.is_initialized():
        return [obj]
    out: list[Any] = [None] * world()
    tdist.all_gather_object(out, obj)
    return out


def shard(items: Sequence) -> list:
    """This rank's contiguous slice of `items` (a step's prompts): rank r of W gets items[r*n//W : (r+1)*n//W]."""
    n, w, r = len(items), world(), rank()
    return list(items[r * n // w:(r + 1) * n // w])


def check_batches(sizes: list[tuple[str, int]]) -> None:
    """Every global batch (name, size) of the run's stages has at least one item per rank (uneven shards are fine
    and exact). The stage registry (train/stages.py) says which sizes each stage has."""
    for name, size in sizes:
        if size < world():
                raise CodechatError(f"{name}={size} is smaller than the number of ranks ({world()}): some rank "
                                    f"would get nothing to train on; raise {name} or run fewer ranks")


def decide(flag: bool) -> bool:
    """Rank 0's `flag` on every rank (a decision made from rank 0's view of the file system, e.g. whether a
    file exists yet, that every rank must follow because what comes next is a collective)."""
    if not tdist.is_initialized():
        return flag
    out = [flag]
    tdist.broadcast_object_list(out, 0)
    return bool(out[0])


def broadcast_params(model: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers to every rank (identical starting points, whatever the init)."""
    if not tdist.is_initialized():
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            tdist.broadcast(t.data, 0)


def sync_grads(model: torch.nn.Module, bucket_mb: int = 64) -> None:
    """Sum the gradients over ranks, in flat buckets per dtype. A parameter without a gradient on this rank
    (e.g. no micro-batch here this step) counts as zeros. Losses must already carry their global weights."""
    if not tdist.is_initialized() or world() == 1 or is_sharded(model):  # FSDP has reduce-scattered them already
        return
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in params:
        by_dtype.setdefault(p.grad.dtype, []).append(p.grad)
    limit = bucket_mb << 20
    for grads in by_dtype.values():
        bucket, size = [], 0
        for g in grads + [None]:
            if g is not None:
                bucket.append(g)
                size += g.numel() * g.element_size()
            if bucket and (g is None or size >= limit):
                flat = torch.cat([b.reshape(-1) for b in bucket])
                tdist.all_reduce(flat)
                off = 0
                for b in bucket:
                    b.copy_(flat[off:off + b.numel()].view_as(b))
                    off += b.numel()
                bucket, size = [], 0


# What agg_loss divides by, per aggregation mode (codechat/algos/aggregation.py): the global count of these is
# the normaliser of the whole batch.
def _tokens(m: torch.Tensor) -> torch.Tensor:
    return (m > 0).sum()


def _sequences(m: torch.Tensor) -> torch.Tensor:
    return (m > 0).any(-1).sum()  # sequences with at least one token, as aggregation._n_rows


def _turns(m: torch.Tensor) -> torch.Tensor:
    return turn_starts(m).sum()  # runs of unmasked tokens, as aggregation.turn_mean


_UNITS = {"token-mean": _tokens, "seq-mean-token-mean": _sequences, "seq-mean-token-sum": _sequences,
          "seq-mean-token-sum-norm": _sequences, "turn-mean": _turns}


def loss_units(mask: torch.Tensor, agg: str) -> float:
    """Count that agg_loss(., mask (B, T), agg) divides by: tokens (token-mean), turns (turn-mean) or non-empty
    sequences."""
    if agg not in _UNITS:
        raise CodechatError(f"loss aggregation '{agg}' has no unit count for data parallelism "
                            f"(valid: {', '.join(_UNITS)})")
    return float(_UNITS[agg](mask))


def batch_advantages(name: str, rewards: torch.Tensor, group_ids: torch.Tensor, cfg,
                     weights: torch.Tensor | None = None) -> torch.Tensor:
    """compute_advantages over the rewards of all ranks, this rank's part returned: (B_local,), times this rank's
    `weights` (B_local,) when given. Group ids are made unique per rank; batch-level statistics (std_scale=batch,
    batch-mean) then equal one-process ones."""
    if world() == 1:
        return compute_advantages(name, rewards, group_ids, cfg, weights=weights)
    parts = gather((rewards.cpu(), group_ids.cpu()))
    offset, rs, gs, start = 0, [], [], 0
    for i, (r, g) in enumerate(parts):
        if i == rank():
            start = sum(len(x) for x in rs)
        rs.append(r)
        gs.append(g.long() + offset)
        offset += int(g.max()) + 1 if len(g) else 0
    adv = compute_advantages(name, torch.cat(rs), torch.cat(gs), cfg)  # (B_global,)
    adv = adv[start:start + len(rewards)].to(rewards.device)  # (B_local,)
    return adv if weights is None else adv * weights.to(adv)


def mean_one(w: torch.Tensor) -> torch.Tensor:
    """Per-sample weights w (B_local,) divided by their mean over the samples of all ranks: mean 1 globally, so
    a rank's weights do not depend on how the batch was split."""
    total, count = all_sum(float(w.sum())), all_sum(float(w.numel()))
    return w / (total / count) if total > 0 else torch.ones_like(w)


def all_items(items: list) -> list:
    """The concatenation of every rank's `items`, in rank order (identical on every rank)."""
    return [x for part in gather(items) for x in part]


def minibatch_plan(n_local: int, minibatch_size: int, epochs: int, seed: int) -> list[torch.Tensor]:
    """The optimizer steps of one RL update: per step, the positions (into this rank's n_local rows) of the rows it
    trains on. `minibatch_size` counts samples over all ranks (0 = all of them in one step): every epoch draws one
    permutation of the global rows (the same on every rank: the seed is shared) and cuts it into minibatches, so
    the number of steps and what each step trains on do not depend on the world size. Same length on every rank.
    Global row g is rank r's row g - offset(r), ranks in order (shard keeps prompts in order)."""
    counts = [int(c) for c in gather(n_local)]
    offset, total = sum(counts[:rank()]), sum(counts)
    mb = minibatch_size if 0 < minibatch_size < total else max(total, 1)
    gen = torch.Generator().manual_seed(seed)
    plan = []
    for _ in range(epochs):
        perm = torch.randperm(total, generator=gen) if epochs > 1 or mb < total else torch.arange(total)
        for s in range(0, max(total, 1), mb):
            g = perm[s:s + mb]
            plan.append(g[(g >= offset) & (g < offset + n_local)] - offset)
    return plan


def micro_batches(model: torch.nn.Module, idx: torch.Tensor, grad_accum: int) -> list[torch.Tensor | None]:
    """`idx` cut into at most `grad_accum` micro-batches. Under FSDP every rank gets the same number of entries
    (every forward/backward is a collective): None marks an idle pass (`fsdp.idle_pass`) on a rank with fewer."""
    micro = list(idx.chunk(max(1, min(grad_accum, len(idx))))) if len(idx) else []
    if is_sharded(model):
        micro += [None] * (int(all_max(len(micro))) - len(micro))
    return micro


def global_units(mask: torch.Tensor, agg: str) -> float:
    """loss_units of a minibatch summed over the ranks: what its aggregated loss divides by."""
    return all_sum(loss_units(mask, agg))


def mean_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """Numeric metrics averaged over the ranks that report them; anything else as rank 0 has it."""
    if world() == 1:
        return metrics
    every = gather(metrics)
    out = dict(every[0])
    for k in {k for m in every for k in m}:
        vals = [m[k] for m in every if isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool)]
        if vals:
            out[k] = sum(vals) / len(vals)
    return out


def per_rank_verifier(cfg):
    """VerifierConfig with `workers=0` (one per core) split between the ranks of this node."""
    if cfg.workers or local_world() == 1 or cfg.backend != "local":
        return cfg
    return dataclasses.replace(cfg, workers=max(1, (os.cpu_count() or 1) // local_world()))


class NullLogger:
    """What ranks other than 0 log to: nothing."""

    def log(self, metrics: dict, step: int) -> None:
        pass

    def close(self) -> None:
        pass
