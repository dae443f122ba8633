"""Data parallelism on the Qwen-shaped model (151,936-token tied table, policy/qwen.py) on CPU with gloo: a GRPO
update (batch-std advantages, KL, 2 micro-batches) on 2 ranks x B prompts equals the update on 1 rank x 2B prompts,
with gradients summed over the ranks (`dist.parallel=ddp`, codechat's fast log-prob path) and with every decoder
layer and then the root (embedding = LM head, final norm) sharded by FSDP2 (`fsdp`, transformers' forward); after
it, the trainer's AdamW (fused) steps the shards."""
import copy
import os
from pathlib import Path

import pytest
import torch
from qwen_helpers import qwen_dir
from train_helpers import fixed_rollouts, part, run_ranks

from codechat.config import DistConfig, ModelConfig, OptimConfig, RunConfig
from codechat.policy import load_policy
from codechat.policy.fsdp import modules, shard
from codechat.rollout.collect import Rollouts
from codechat.train import dist
from codechat.train.checkpoint import TrainState
from codechat.train.common import Context, make_optimizer
from codechat.train.rl import rl_update, stage_algo

CUT = [0, 2, 4]  # groups of fixed_rollouts per rank: rank 0 the first two prompts, rank 1 the other two


def config(path: str) -> RunConfig:
    cfg = RunConfig(model=ModelConfig(path=path, device="cpu"))
    cfg.algo.std_scale, cfg.algo.kl_beta, cfg.algo.agg = "batch", 0.04, "token-mean"  # batch statistics, KL
    cfg.rl.grad_accum, cfg.rl.max_grad_norm = 2, 0.0  # no clipping: with SGD the update is the gradient itself
    return cfg


def update(path: str, r: Rollouts, tmp: Path, fsdp: bool) -> dict:
    """One rl_update with SGD(1.0) from the saved weights: the weight change per parameter (whole tensors), the
    metrics, the FSDP-managed module classes, and whether a step of the trainer's AdamW then moved every weight."""
    cfg = config(path)
    policy = load_policy(cfg.model)
    model = policy.model
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    ref = copy.deepcopy(model).eval()
    if fsdp:
        shard(model)
        shard(ref)
    ctx = Context(cfg, policy, None, None, None, TrainState(), tmp, [])
    a = stage_algo(cfg, "grpo")
    adv = dist.batch_advantages(a.advantage, r.rewards, r.group_ids, a)  # (N,)
    model.train()
    rows = torch.arange(len(r.rewards))
    metrics = rl_update(ctx, r, adv, rows, ref, torch.optim.SGD(model.parameters(), lr=1.0), a)
    full = lambda v: v.full_tensor() if hasattr(v, "full_tensor") else v  # noqa: E731  (FSDP: a shard)
    delta = {k: full(v.detach()) - before[k] for k, v in model.named_parameters()}
    mid = {k: full(v.detach()).clone() for k, v in model.named_parameters()}
    opt, _ = make_optimizer(model, 1e-3, 0, 1, False, OptimConfig())
    rl_update(ctx, r, adv, rows, ref, opt, a)
    moved = all((full(v.detach()) != mid[k]).any().item() for k, v in model.named_parameters())
    return {"delta": delta, "metrics": metrics, "sharded": sorted({type(m).__name__ for m in modules(model)}),
            "adamw_moved": moved, "fused": opt.defaults["fused"]}


def _rank(rank: int, world: int, port: int, path: str, out: str, fsdp: bool) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    assert dist.init(DistConfig(backend="gloo"))
    vocab = load_policy(config(path).model).model.config.vocab_size
    result = update(path, part(fixed_rollouts(vocab), CUT[rank], CUT[rank + 1]), Path(out), fsdp)
    torch.save(result, Path(out) / f"rank{rank}.pt")
    dist.close()


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """The update on 1 rank x all the prompts (the reference both modes must equal)."""
    torch.set_num_threads(1)
    path = str(qwen_dir("qwen2.5"))
    return path, update(path, fixed_rollouts(151_936), tmp_path_factory.mktemp("one"), fsdp=False)


@pytest.mark.slow
@pytest.mark.parametrize("fsdp", [False, True], ids=["ddp", "fsdp"])
def test_two_ranks_equal_one_rank_on_the_qwen_model(one_rank, tmp_path, fsdp):
    path, one = one_rank
    run_ranks(_rank, path, str(tmp_path), fsdp, deadline_s=300)
    r0, r1 = (torch.load(tmp_path / f"rank{i}.pt") for i in (0, 1))
    assert all(torch.equal(r0["delta"][k], r1["delta"][k]) for k in r0["delta"]), "ranks disagree"
    scale = max(v.abs().max().item() for v in one["delta"].values())
    diff = max((r0["delta"][k] - one["delta"][k]).abs().max().item() for k in one["delta"])
    print(f"{'fsdp' if fsdp else 'ddp'}: max |update diff| 2 ranks vs 1: {diff:.2e} (largest update {scale:.2e})")
    assert scale > 1e-4 and diff < 1e-4 * scale
    assert r0["delta"]["model.embed_tokens.weight"].abs().sum() > 0  # the tied table learned on both paths
    assert r0["metrics"]["grad_norm"] == pytest.approx(one["metrics"]["grad_norm"], rel=1e-4)
    if fsdp:  # each decoder layer is its own FSDP unit, the root holds the rest
        assert r0["sharded"] == ["FSDPQwen2DecoderLayer", "FSDPQwen2ForCausalLM"]
    else:
        assert r0["sharded"] == []
    assert r0["adamw_moved"] and r1["adamw_moved"] and r0["fused"] and one["fused"]
