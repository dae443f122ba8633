"""Data parallelism (codechat/train/dist.py) on CPU with gloo: a GRPO update on 2 ranks x B prompts equals the
update on 1 rank x 2B prompts (unequal completion lengths, batch-std advantages, KL, grad accumulation,
minibatches counted over all ranks, inner epochs, a rank with nothing, FSDP), and `torchrun -m codechat train`
writes logs, rollouts and checkpoints from rank 0 only."""
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_helpers import P, fixed_rollouts, free_port, part, run_ranks

from codechat.algos import AGG_MODES
from codechat.config import DistConfig, ModelConfig, RunConfig
from codechat.policy import load_policy
from codechat.policy.fsdp import shard
from codechat.rollout.collect import Rollouts
from codechat.train import dist
from codechat.train.checkpoint import TrainState
from codechat.train.common import Context
from codechat.train.rl import rl_update, stage_algo

ROOT = Path(__file__).resolve().parents[1]


def torchrun(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node 2 -m codechat train ARGS` on gloo; fails the test on a non-zero exit."""
    exe = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("torchrun not found beside the Python interpreter")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [exe, "--nproc_per_node", "2", "--master_port", str(free_port()), "-m", "codechat", "train", *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p



def config(grad_accum: int = 2, minibatch: int = 0, epochs: int = 1) -> RunConfig:
    cfg = RunConfig(model=ModelConfig(path="tiny", device="cpu"))
    cfg.algo.std_scale, cfg.algo.kl_beta, cfg.algo.agg = "batch", 0.04, "token-mean"  # batch statistics, KL
    cfg.rl.grad_accum, cfg.rl.max_grad_norm = grad_accum, 0.0  # no clipping: the update is the gradient itself
    cfg.rl.minibatch_size, cfg.rl.epochs = minibatch, epochs
    return cfg


def vocab() -> int:
    return load_policy(config().model).model.config.vocab_size


def update(r: Rollouts, tmp: Path, grad_accum: int = 2, fsdp: bool = False, minibatch: int = 0, epochs: int = 1,
           agg: str = "token-mean", ref_noise: float = 0.0, lr: float = 1.0) -> tuple[dict[str, torch.Tensor], dict]:
    """One rl_update with SGD(lr) on the tiny preset; returns the weight change per parameter and the update's
    metrics. fsdp: policy and reference sharded over the ranks (dist.parallel=fsdp). ref_noise: a reference that
    differs from the policy."""
    torch.manual_seed(0)
    cfg = config(grad_accum, minibatch, epochs)
    cfg.algo.agg = agg
    policy = load_policy(cfg.model)
    model = policy.model
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    ref = copy.deepcopy(model).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * ref_noise)
    if fsdp:
        shard(model)
        shard(ref)
    ctx = Context(cfg, policy, None, None, None, TrainState(), tmp, [])
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    a = stage_algo(cfg, "grpo")
    adv = dist.batch_advantages(a.advantage, r.rewards, r.group_ids, a)  # (N,)
    model.train()
    metrics = rl_update(ctx, r, adv, torch.arange(len(r.rewards)), ref, opt, a)
    full = lambda v: v.full_tensor() if hasattr(v, "full_tensor") else v  # noqa: E731  (FSDP: a shard)
    return {k: (full(v.detach()) - before[k]) for k, v in model.named_parameters()}, metrics


CASES = {  # name: (groups per rank, update arguments)
    "even": ([0, 2, 4], dict()),
    "minibatches-epochs": ([0, 1, 4], dict(minibatch=4, epochs=2, lr=0.05)),  # 12 samples: 3 steps x 2 epochs
    "empty-rank": ([0, 4, 4], dict(minibatch=5)),  # rank 1 has no rows: 3 optimizer steps on both
    "fsdp": ([0, 3, 4], dict(grad_accum=4, fsdp=True)),  # 4 micro-batches and 3 (the short rank runs an idle pass)
}


def _rank(rank: int, world: int, port: int, out: str, case: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    assert dist.init(DistConfig(backend="gloo"))
    if case == "weights":  # difficulty weights: 3 samples here, 1 there; mean 1 over all 4
        w = torch.tensor([1.0, 2.0, 3.0]) if rank == 0 else torch.tensor([6.0])
        torch.save(dist.mean_one(w), Path(out) / f"rank{rank}.pt")
    else:
        cut, kw = CASES[case]
        torch.save(update(part(fixed_rollouts(vocab()), cut[rank], cut[rank + 1]), Path(out), **kw),
                   Path(out) / f"rank{rank}.pt")
    dist.close()


def two_ranks(tmp_path: Path, case: str):
    """Both ranks' results (train_helpers.run_ranks: forked, with a deadline in case a child hangs)."""
    run_ranks(_rank, str(tmp_path), case)
    return torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")


def max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_ranks_equal_one_rank_with_twice_the_prompts(tmp_path, case):
    """2 ranks x their prompts == 1 rank x all of them: the same weights (and the same optimizer steps, the same
    grad_norm: a rank with no rows does not inflate it), also with minibatches and epochs > 1 (rl.minibatch_size
    counts samples over all ranks) and under FSDP."""
    torch.set_num_threads(1)
    full = fixed_rollouts(vocab())
    kw = {k: v for k, v in CASES[case][1].items() if k != "fsdp"}
    one, one_m = update(full, tmp_path, **kw)  # 1 rank x 2B prompts
    (r0, m0), (r1, m1) = two_ranks(tmp_path, case)  # 2 ranks x B prompts
    assert all(torch.equal(r0[k], r1[k]) for k in r0), "ranks disagree"
    diff, scale = max_diff(r0, one), max(v.abs().max().item() for v in one.values())
    print(f"{case}: max |update diff| 2 ranks vs 1: {diff:.2e} (largest update {scale:.2e})")
    assert scale > 1e-4 and diff < 1e-4 * scale
    assert m0["optimizer_steps"] == m1["optimizer_steps"] == one_m["optimizer_steps"]
    assert m0["grad_norm"] == pytest.approx(one_m["grad_norm"], rel=1e-4)
    assert m1["grad_norm"] == pytest.approx(one_m["grad_norm"], rel=1e-4)
    if case == "even":  # what averaging the two ranks' own token-means would have given (the mistake it guards)
        halves = [update(part(full, 0, P // 2), tmp_path)[0], update(part(full, P // 2, P), tmp_path)[0]]
        naive = max(((halves[0][k] + halves[1][k]) / 2 - one[k]).abs().max().item() for k in one)
        assert naive > 100 * diff


def test_minibatch_size_counts_samples_over_all_ranks(tmp_path):
    """12 samples, minibatch_size 4, 2 epochs: 6 optimizer steps, in one process as on two ranks (above)."""
    _, m = update(fixed_rollouts(vocab()), tmp_path, minibatch=4, epochs=2)
    assert m["optimizer_steps"] == 6.0


def test_difficulty_weights_have_mean_one_over_all_ranks(tmp_path):
    w0, w1 = two_ranks(tmp_path, "weights")
    assert torch.allclose(torch.cat([w0, w1]), torch.tensor([1.0, 2.0, 3.0, 6.0]) / 3.0)


def test_logged_kl_is_the_token_mean_whatever_the_aggregation(tmp_path):
    """The trainer's KL goes through algos.kl_loss: the logged `kl` is the token mean of the per-token estimate
    (not the aggregated loss term), under seq-mean-token-sum too."""
    from codechat.algos import kl_penalty, masked_mean
    from codechat.policy import completion_logprobs

    r = fixed_rollouts(vocab())
    torch.manual_seed(0)
    model = load_policy(config().model).model
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        lp = completion_logprobs(model, r.prompts, r.batch.prompt_index, r.batch.tokens, r.batch.mask)
        ref_lp = completion_logprobs(ref, r.prompts, r.batch.prompt_index, r.batch.tokens, r.batch.mask)
    want = masked_mean(kl_penalty(lp, ref_lp, "k3"), r.batch.mask).item()
    for agg in ("token-mean", "seq-mean-token-sum"):
        _, m = update(r, tmp_path, grad_accum=1, agg=agg, ref_noise=0.05)  # one micro-batch: its token mean
        assert m["kl"] == pytest.approx(want, rel=1e-4), agg
    assert want > 1e-3


def test_grad_accumulation_equals_one_micro_batch(tmp_path):
    """The per-micro-batch weighting makes grad_accum=2 (unequal token counts) equal grad_accum=1, one process."""
    full = fixed_rollouts(vocab())
    a, b = update(full, tmp_path, grad_accum=2)[0], update(full, tmp_path, grad_accum=1)[0]
    assert max_diff(a, b) < 1e-6


@pytest.mark.parametrize("mode", sorted(AGG_MODES))
def test_loss_units_split_any_batch_exactly(mode):
    """For every aggregation mode: parts weighted by units(part) / units(all) sum to the loss of the whole batch
    (also with an empty row and an empty part). A new mode in AGG_MODES must get its unit count here."""
    from codechat.algos import agg_loss
    g = torch.Generator().manual_seed(1)
    L = torch.randn(6, 5, generator=g)  # (B, T)
    m = (torch.rand(6, 5, generator=g) > 0.4).float()
    m[2] = 0  # a row masked out whole
    whole = agg_loss(L, m, mode, 5.0)
    total = dist.loss_units(m, mode)
    for cuts in ([0, 3, 6], [0, 0, 2, 6], [0, 1, 2, 3, 4, 5, 6]):
        parts = sum(agg_loss(L[a:b], m[a:b], mode, 5.0) * dist.loss_units(m[a:b], mode) / total
                    for a, b in zip(cuts, cuts[1:]) if b > a)
        assert torch.allclose(parts, whole, atol=1e-6), (mode, cuts)


@pytest.mark.slow
def test_torchrun_fsdp_run_equals_ddp_run_and_resumes_across_modes(tmp_path):
    """`torchrun --nproc_per_node 2 -m codechat train`, `dist.parallel=fsdp` end to end (SFT, then GRPO with a
    sharded reference, evaluation, checkpoints): the same samples and weights as the `ddp` run, and rank 0 alone
    writes (one metrics line per step, every rank's rollouts, each checkpoint once). Then each run resumes under
    the other mode (optimizer state by parameter name <-> by index) and both take the same next step; last, one
    process resumes the ddp run and the global data position carries over."""
    from safetensors.torch import load_file

    args = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "sampling.stop=[e]", "log.progress=false",
            "log.plot=false", "verifier.workers=1", "rl.prompts_per_step=3", "rl.group_size=2", "rl.steps=2",
            "checkpoint.every=1", "stages=[sft,grpo]", "data.sft=builtin:toy-sft", "sft.steps=1", "sft.batch_size=2",
            "dist.backend=gloo", "algo.kl_beta=0.04", "data.eval=builtin:toy", "data.max_eval_tasks=2",
            "eval.every=1", "rewards.components={pass-all: 1.0, length: 1.0}", "rewards.length_budget=2",
            "rewards.length_per_token=0.1", "rl.lr=1e-3"]  # stop strings + a length reward: unequal lengths, nonzero advantages

    def weights(run, step):
        return load_file(run / "checkpoints" / f"step-{step:07d}" / "model" / "model.safetensors")

    runs = {m: tmp_path / m for m in ("ddp", "fsdp")}
    for mode, run in runs.items():
        torchrun(*args, f"dist.parallel={mode}", f"run_dir={run}")
    assert (runs["ddp"] / "rollouts.jsonl").read_text() == (runs["fsdp"] / "rollouts.jsonl").read_text()
    rows = [json.loads(x) for x in (runs["ddp"] / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[1]["samples"] == 6  # both ranks' samples counted
    assert len((runs["ddp"] / "rollouts.jsonl").read_text().splitlines()) == 12  # 2 steps x 3 prompts x 2 samples
    assert [c.name for c in sorted((runs["ddp"] / "checkpoints").iterdir())] == [f"step-000000{i}" for i in (1, 2, 3)]
    a, b = weights(runs["ddp"], 3), weights(runs["fsdp"], 3)
    assert sorted(a) == sorted(b)  # tied weights written once, as save_pretrained does
    moved = max((a[k] - weights(runs["ddp"], 1)[k]).abs().max().item() for k in a)
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"FSDP vs DDP run: max weight diff {diff:.2e}, GRPO moved the weights by up to {moved:.2e}")
    # (the gradients agree to ~1e-7 relative (test above); AdamW's m / sqrt(v) magnifies the difference on
    # entries whose gradient is ~0 (FSDP's update runs transformers' forward, ddp codechat's fast one))
    assert moved > 1e-4 and diff < 0.05 * moved
    torchrun("--resume", str(runs["ddp"]), "rl.steps=3", "dist.parallel=fsdp")
    torchrun("--resume", str(runs["fsdp"]), "rl.steps=3", "dist.parallel=ddp")
    step = {m: {k: v - weights(r, 3)[k] for k, v in weights(r, 4).items()} for m, r in runs.items()}
    size = max(v.abs().max().item() for v in step["ddp"].values())
    diff = max((step["ddp"][k] - step["fsdp"][k]).abs().max().item() for k in a)
    print(f"step after resume ddp->fsdp vs fsdp->ddp: max diff {diff:.2e} (step up to {size:.2e})")
    assert size > 0 and diff < 0.05 * size
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "codechat", "train", "--resume", str(runs["ddp"]), "rl.steps=4"],
                       env=env, capture_output=True, text=True, timeout=240)  # one process resumes a 2-rank run
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((runs["ddp"] / "checkpoints" / "step-0000005" / "state.json").read_text())["data_pos"] == 12


@pytest.mark.slow
def test_torchrun_fsdp_sft_rft_dpo(tmp_path):
    """The other stages under `dist.parallel=fsdp` on 2 ranks: SFT, RFT with ReST-EM (the restart loads whole
    weights into the shards), online DPO (a sharded reference); every step logs a finite loss."""
    run = tmp_path / "run"
    args = ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "sampling.max_new_tokens=12", "log.progress=false",
            "log.plot=false", "verifier.workers=1", "checkpoint.every=0", "stages=[sft,rft,dpo]", "sft.steps=30",
            "sft.lr=3e-3", "sft.batch_size=16", "rft.rounds=2", "rft.prompts=4", "rft.group_size=4", "rft.steps=1",
            "rft.batch_size=2", "rft.rest_em=true", "dpo.steps=2", "dpo.prompts_per_step=2", "dpo.group_size=4",
            "dpo.pairs_per_step=2", "dpo.lr=1e-3", "dist.backend=gloo", "dist.parallel=fsdp", f"run_dir={run}"]
    torchrun(*args, timeout=300)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    losses = {s: [r["loss"] for r in rows if r.get("stage") == s and "loss" in r] for s in ("sft", "rft", "dpo")}
    assert [len(v) for v in losses.values()] == [30, 2, 2], losses
    assert all(torch.isfinite(torch.tensor(v)).all() for v in losses.values())
    assert losses["sft"][-1] < losses["sft"][0]
    assert (run / "checkpoints" / "step-0000034" / "model" / "model.safetensors").is_file()


def _save_rank(rank: int, world: int, port: int, out: str, fsdp: bool = False) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from codechat.config import DistConfig
    from codechat.policy import fsdp as F
    from codechat.policy import load_policy
    dist.init(DistConfig(backend="gloo"))
    policy = load_policy(config().model)
    policy.save(Path(out) / f"plain{rank}")  # transformers' save_pretrained writes nothing on ranks > 0
    F.shard(policy.model)
    with F.full_weights(policy.model):
        policy.save(Path(out) / f"fsdp{rank}")  # an FSDP<Arch> class: written plainly
    dist.close()


def test_every_rank_can_save_a_loadable_model(tmp_path):
    """What each rank's vLLM engine starts from: Policy.save on rank 1, and of a gathered FSDP model, gives the
    same files as one process (architecture name, tied weights once)."""
    from safetensors.torch import load_file
    run_ranks(_save_rank, str(tmp_path))
    from codechat.policy import load_policy
    load_policy(config().model).save(tmp_path / "one")
    want = load_file(tmp_path / "one" / "model.safetensors")
    arch = json.loads((tmp_path / "one" / "config.json").read_text())["architectures"]
    for d in ("plain1", "fsdp0", "fsdp1"):
        got = load_file(tmp_path / d / "model.safetensors")
        assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want), d
        assert json.loads((tmp_path / d / "config.json").read_text())["architectures"] == arch == ["LlamaForCausalLM"]
        assert (tmp_path / d / "tokenizer.json").is_file()
