"""FSDP (torch's `fully_shard`, FSDP2) for models whose weights, gradients and AdamW states do not fit one device.

    shard(model)                       # every decoder layer, then the root: each rank keeps 1/W of each tensor
    with full_weights(model): ...      # whole weights on every rank: sampling, no-grad log-probs, vLLM push
    sd = full_state_dict(model)        # whole weights on rank 0 (CPU), for checkpoints

How the trainer uses it (codechat/train, `dist.parallel: fsdp`):
- Update: forward and backward go through the model's own forward, so FSDP's hooks gather each layer's weights
  just in time and reduce-scatter its gradients. The divide factor is 1 (a sum): the trainer's losses already
  carry their global weights (train/dist.py), as with `ddp`. Each rank's AdamW holds only its shards.
- Every FSDP forward/backward is a collective: all ranks must run the same number. A rank with nothing to train
  on runs `idle_pass` (a zero-loss forward/backward) instead of skipping.
- Generation and no-grad log-probs run inside `full_weights`: one all-gather, after which the modules hold plain
  tensors and codechat's fast paths (fastlm.py, fused projections) run with no collectives, so ranks may sample
  different lengths. The price is the whole weights on each rank while sampling (what vLLM holds too).
- Checkpoints hold the whole model (HF format) and the whole optimizer state keyed by parameter name, so a run
  resumes on any number of ranks, with or without FSDP.

Simplifications: no mixed-precision policy (parameters, gradients and AdamW states in `model.dtype`), no CPU
offload, no activation checkpointing, no LoRA (adapters fit one device anyway).
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from codechat import CodechatError


def _fsdp():
    from torch.distributed.fsdp import FSDPModule, fully_shard  # torch.distributed: loaded only on the FSDP path
    return FSDPModule, fully_shard


def modules(model: torch.nn.Module) -> list:
    """The FSDP-managed modules of `model` (empty when it is not sharded)."""
    FSDPModule, _ = _fsdp()
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def is_sharded(model: torch.nn.Module) -> bool:
    return bool(modules(model))


def sharded_now(model: torch.nn.Module) -> bool:
    """Some parameter is a shard right now (outside `full_weights`): only FSDP's own forward can run."""
    from torch.distributed.tensor import DTensor  # torch.distributed: loaded only on the FSDP path
    return any(isinstance(p, DTensor) for p in model.parameters())


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """fully_shard every transformer block (the model's `_no_split_modules` classes), then the root (embeddings,
    final norm, LM head, tied or not). Needs an initialised process group; the weights must already be equal on
    all ranks (dist.broadcast_params)."""
    _, fully_shard = _fsdp()
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in blocks]
    if not layers:
        raise CodechatError(f"dist.parallel=fsdp: {type(model).__name__} names no transformer block class "
                            f"(_no_split_modules) to shard by; use dist.parallel=ddp")
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    for m in modules(model):
        m.set_gradient_divide_factor(1.0)  # sum over ranks: the losses carry their global weights
        m.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-multiplied sum)
    return model


@contextlib.contextmanager
def full_weights(model: torch.nn.Module):
    """Whole weights on every rank inside the block (an all-gather on entry: every rank must enter, the same
    number of times); sharded again on exit. A no-op for a model that is not sharded, or already gathered."""
    mods = modules(model)
    if not mods or not sharded_now(model):
        yield model
        return
    for m in mods:
        m.unshard()
        m.set_reshard_after_forward(False)  # forwards inside the block must not drop the gathered weights
    try:
        yield model
    finally:
        for m in mods:
            m.reshard()
            m.set_reshard_after_forward(True)


def _options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions  # torch.distributed: on the FSDP path only
    return StateDictOptions(full_state_dict=True, **kw)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights on rank 0, on the CPU ({} on the other ranks). A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict  # see above
    sd = get_model_state_dict(model, options=_options(cpu_offload=True))
    # tied weights (an LM head sharing the embedding) once, under the first name, as save_pretrained writes them
    first = {n for n, _ in model.named_parameters()}
    aliases = {n for n, _ in model.named_parameters(remove_duplicate=False)} - first
    return {k: v for k, v in sd.items() if k not in aliases}


def load_full_state_dict(model: torch.nn.Module, sd: dict[str, torch.Tensor]) -> None:
    """Load whole weights (every rank holds `sd`) into a sharded or plain model."""
    if not is_sharded(model):
        model.load_state_dict(sd)
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict  # see above
    set_model_state_dict(model, sd, options=_options())


def optimizer_state(model: torch.nn.Module, opt) -> dict[str, Any]:
    """What a checkpoint stores of `opt`: its state_dict, or for a sharded model the whole state keyed by
    parameter name (on rank 0; a collective)."""
    if not is_sharded(model):
        return opt.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict  # see above
    return get_optimizer_state_dict(model, opt, options=_options(cpu_offload=True))


def load_optimizer_state(model: torch.nn.Module, opt, sd: dict[str, Any]) -> None:
    """Load either form of `optimizer_state` into `opt`, sharded or not: a run saved with or without FSDP resumes
    with or without it, on any number of ranks."""
    params = [p for g in sd.get("param_groups", []) for p in g["params"]]
    by_name = params and isinstance(params[0], str)
    if not by_name and not is_sharded(model):
        opt.load_state_dict(sd)
        return
    if not by_name:  # indices -> names: the optimizer was built over the trainable parameters, in model order
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        sd = {"state": {names[i]: s for i, s in sd["state"].items()},
              "param_groups": [dict(g, params=[names[i] for i in g["params"]]) for g in sd["param_groups"]]}
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict  # see above
    set_optimizer_state_dict(model, opt, sd, options=_options())


def idle_pass(model: torch.nn.Module) -> None:
    """A forward and backward contributing zero gradient: what a rank with no data runs so that FSDP's
    collectives stay matched across ranks. No-op for a model that is not sharded."""
    if not is_sharded(model):
        return
    dev = next(model.parameters()).device
    out = model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=dev)).logits
    (out.float().sum() * 0.0).backward()


def grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """Global gradient norm (over all shards), clipping to max_norm when it is > 0."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # over all shards for DTensor gradients
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
