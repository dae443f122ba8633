"""The duplicate-aware RL update (rl.dedup) against the naive one: the same weights after rl_update, to float
tolerance, with inner epochs, minibatches, gradient accumulation, every aggregation mode, the KL term, LoRA and
2 ranks; the forward runs on distinct rows only; and the verifier hook (verifier.dedup, verifier.cache_size)."""
import copy
import os
from pathlib import Path

import pytest
import torch
from train_helpers import part, run_ranks

from codechat.algos import AGG_MODES
from codechat.config import ModelConfig, RunConfig
from codechat.policy import SampleBatch
from codechat.rollout.collect import Rollouts
from codechat.train import dist, rl

P, G, T = 4, 4, 9  # 4 prompts x 4 samples; every group holds copies


def config(**rl) -> RunConfig:
    cfg = RunConfig(model=ModelConfig(path="tiny", device="cpu"))
    cfg.algo.kl_beta, cfg.algo.clip_high = 0.04, 0.28
    cfg.rl.max_grad_norm = 0.0  # no clipping: the update is the gradient itself
    for k, v in rl.items():
        setattr(cfg.rl, k, v)
    return cfg


def rollouts(vocab: int) -> Rollouts:
    """P groups of G completions, each group made of 2-3 distinct ones with copies; unequal lengths."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (3 + i,), generator=g).tolist() for i in range(P)]
    distinct = torch.randint(3, vocab, (P, 3, T), generator=g)  # (P, 3, T)
    dlen = torch.tensor([[9, 2, 5], [3, 3, 8], [1, 7, 4], [6, 9, 2]])  # (P, 3)
    pick = torch.tensor([[0, 1, 0, 0], [2, 0, 2, 1], [1, 1, 0, 1], [0, 2, 2, 2]])  # (P, G) which distinct row
    tokens = torch.stack([distinct[p, pick[p]] for p in range(P)]).view(P * G, T)  # (N, T)
    lens = torch.stack([dlen[p, pick[p]] for p in range(P)]).view(-1)  # (N,)
    mask = (torch.arange(T)[None] < lens[:, None]).float()  # (N, T)
    tokens = torch.where(mask > 0, tokens, torch.full_like(tokens, 1))
    rewards = (pick == 0).float().view(-1)  # distinct row 0 passes: duplicates share rewards and advantages
    batch = SampleBatch(torch.arange(P).repeat_interleave(G), tokens, mask, -0.5 * mask, ["stop"] * (P * G),
                        [""] * (P * G), lens)
    return Rollouts([None] * P, prompts, batch, [None] * (P * G), rewards)


def update(r: Rollouts, cfg: RunConfig, tmp: Path, seen: list | None = None) -> tuple[dict, dict]:
    """One rl_update with SGD from the preset's weights; (weight change per parameter, metrics)."""
    from codechat.policy import load_policy
    from codechat.train.checkpoint import TrainState
    from codechat.train.common import Context
    from codechat.train import rl

    torch.manual_seed(0)
    policy = load_policy(cfg.model)
    model = policy.model
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    ref = None if cfg.model.lora_r else copy.deepcopy(model).eval()
    ctx = Context(cfg, policy, None, None, None, TrainState(), tmp, [])
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    a = rl.stage_algo(cfg, "grpo")
    adv = dist.batch_advantages(a.advantage, r.rewards, r.group_ids, a)  # (N,)
    model.train()
    real = rl.completion_logprobs
    if seen is not None:  # record the rows of every forward pass

        def spy(model, prompts, idx, tokens, *args, **kw):
            seen.append(tokens.shape[0])
            return real(model, prompts, idx, tokens, *args, **kw)

        rl.completion_logprobs = spy
    try:
        if cfg.model.lora_r:
            ref = model  # LoRA: the reference is the base with adapters off (rl_update switches them off)
        met = rl.rl_update(ctx, r, adv, torch.arange(len(r.rewards)), ref, opt, a)
    finally:
        rl.completion_logprobs = real
    return {k: (v.detach() - before[k]) for k, v in model.named_parameters()}, met


def close(a: dict, b: dict, rel: float = 1e-4) -> tuple[float, float]:
    scale = max(v.abs().max().item() for v in b.values())
    diff = max((a[k] - b[k]).abs().max().item() for k in b)
    assert scale > 1e-5, "nothing was learned"
    assert diff <= rel * scale, (diff, scale)
    return diff, scale


def vocab() -> int:
    from codechat.policy import load_policy
    return load_policy(config().model).model.config.vocab_size


@pytest.mark.parametrize("agg,epochs,minibatch_size,grad_accum", [
    *[(agg, 2, 7, 2) for agg in sorted(AGG_MODES)],  # every mode with epochs, minibatches and accumulation
    ("token-mean", 1, 0, 1),  # one pass: no old log-probs
    ("seq-mean-token-mean", 3, 0, 1)])  # one minibatch: duplicates share every micro-batch
def test_dedup_update_equals_naive(tmp_path, agg, epochs, minibatch_size, grad_accum):
    r = rollouts(vocab())
    kw = dict(epochs=epochs, minibatch_size=minibatch_size, grad_accum=grad_accum)
    cfg_naive, cfg_dedup = config(dedup=False, **kw), config(dedup=True, **kw)
    cfg_naive.algo.agg = cfg_dedup.algo.agg = agg
    naive, m_naive = update(r, cfg_naive, tmp_path)
    dedup, m_dedup = update(r, cfg_dedup, tmp_path)
    close(dedup, naive)
    assert m_naive.keys() == m_dedup.keys() and m_dedup["optimizer_steps"] == epochs * -(-16 // (minibatch_size or 16))
    for k in set(m_naive) - {"update/dedup_frac"}:  # loss, clip fractions, KL, entropy, grad norm agree
        assert m_dedup[k] == pytest.approx(m_naive[k], rel=1e-4, abs=1e-6), k
    assert m_naive["update/dedup_frac"] == 0.0
    assert m_dedup["update/dedup_frac"] > (0.3 if grad_accum == 1 and not minibatch_size else 0.0)


def test_micro_batch_tokens_splits_the_update_like_grad_accum(tmp_path):
    """rl.micro_batch_tokens: a minibatch with more tokens than the budget runs in ceil(tokens / budget) micro-batches,
    the same split and the same update (bit for bit) as rl.grad_accum of that count; the accumulated update equals
    the one-pass update within float noise; 0 = no limit."""
    r = rollouts(vocab())
    budget = -(-int(r.batch.n_tokens.sum()) // 3)  # three micro-batches' worth of tokens
    seen_budget, seen_accum, seen_one = [], [], []
    by_budget, _ = update(r, config(dedup=False, micro_batch_tokens=budget), tmp_path, seen_budget)
    by_accum, _ = update(r, config(dedup=False, micro_batch_tokens=0, grad_accum=3), tmp_path, seen_accum)
    one, _ = update(r, config(dedup=False, micro_batch_tokens=0), tmp_path, seen_one)
    assert seen_budget == seen_accum == [16, 6, 6, 4]  # the reference pass, then three policy micro-batches
    assert seen_one == [16, 16]
    assert all(torch.equal(by_budget[k], by_accum[k]) for k in by_accum)
    close(by_budget, one)
    c = config(micro_batch_tokens=1024, grad_accum=2).rl
    assert rl.micro_count(torch.tensor([700, 700, 700]), c, torch.device("cpu")) == 3
    assert rl.micro_count(torch.tensor([700, 700, 700]), c, torch.device("cuda")) == 2  # a GPU: grad_accum alone
    assert rl.micro_count(torch.tensor([100, 100]), c, torch.device("cpu")) == 2


def test_forward_runs_on_distinct_rows_only(tmp_path):
    r = rollouts(vocab())
    seen_naive, seen_dedup = [], []
    update(r, config(dedup=False, epochs=2), tmp_path, seen_naive)
    _, met = update(r, config(dedup=True, epochs=2), tmp_path, seen_dedup)
    assert seen_naive == [P * G] * 3  # reference, 2 epochs (the first epoch's forward is the old pass)
    assert seen_dedup == [9] * 3  # 9 distinct (prompt, completion) rows out of 16
    assert met["update/dedup_frac"] == pytest.approx(1 - 9 / 16)


def test_dedup_with_lora_equals_naive(tmp_path):
    pytest.importorskip("peft")
    r = rollouts(vocab())
    cfg_n, cfg_d = config(dedup=False, epochs=2), config(dedup=True, epochs=2)
    cfg_n.model.lora_r = cfg_d.model.lora_r = 4
    naive, _ = update(r, cfg_n, tmp_path)
    dedup, _ = update(r, cfg_d, tmp_path)
    naive = {k: v for k, v in naive.items() if "lora" in k}
    assert naive
    close({k: dedup[k] for k in naive}, naive)


def _rank(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from codechat.config import DistConfig
    assert dist.init(DistConfig(backend="gloo"))
    full = rollouts(vocab())
    per = P // world
    delta, _ = update(part(full, rank * per, (rank + 1) * per, G), config(dedup=True, epochs=2, grad_accum=2),
                      Path(out))
    torch.save(delta, Path(out) / f"rank{rank}.pt")
    dist.close()


def test_two_ranks_with_dedup_equal_one_naive_rank(tmp_path):
    torch.set_num_threads(1)
    one, _ = update(rollouts(vocab()), config(dedup=False, epochs=2, grad_accum=2), tmp_path)
    run_ranks(_rank, str(tmp_path))
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert all(torch.equal(r0[k], r1[k]) for k in r0), "ranks disagree"
    close(r0, one)


def greedy_run(tmp_path, *extra) -> list[dict]:
    """2 GRPO steps, greedy: the G samples of a prompt are identical; lr ~0 and all 10 toy tasks per step, so
    step 2 samples exactly what step 1 did."""
    import json

    from codechat.config.io import load_config
    from codechat.train import train

    run = tmp_path / "run"
    train(load_config(None, ["stages=[grpo]", "data.train=builtin:toy", "sampling.top_k=1",
                             "sampling.max_new_tokens=6", "rl.prompts_per_step=10", "rl.group_size=4",
                             "rl.steps=2", "rl.lr=1e-9", "log.progress=false", "log.plot=false", "verifier.workers=1",
                             "checkpoint.every=0", "algo.kl_beta=0.04", f"run_dir={run}", *extra]))
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_training_logs_verify_and_update_dedup_and_the_settings_work(tmp_path):
    on = greedy_run(tmp_path / "on", "verifier.cache_size=100")
    assert on[0]["verify/dedup_frac"] == pytest.approx(0.75) and on[0]["update/dedup_frac"] == pytest.approx(0.75)
    assert on[0]["verify/cache_hit_frac"] == 0.0
    assert on[1]["verify/cache_hit_frac"] == 1.0 and on[1]["verify/dedup_frac"] == 1.0  # nothing ran at step 2
    off = greedy_run(tmp_path / "off", "verifier.dedup=false", "rl.dedup=false")
    assert off[0]["verify/dedup_frac"] == 0.0 and off[0]["update/dedup_frac"] == 0.0
    for a, b in zip(on, off):  # the same run either way
        assert a["reward_mean"] == b["reward_mean"] and a["kl"] == pytest.approx(b["kl"], abs=1e-6)
    with pytest.raises(Exception, match="verifier.cache_size"):
        greedy_run(tmp_path / "bad", "verifier.cache_size=-1")
