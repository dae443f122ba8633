"""Duplicate-aware update (codechat/algos/dedup.py): grouping rules, and the deduplicated loss, metrics and
gradients against the naive per-sample computation for every aggregation mode and policy loss."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat.algos import AGG_MODES, KL_ESTIMATORS, POLICY_LOSSES, agg_loss, kl_penalty, policy_loss
from codechat.algos.dedup import expand, find_duplicates
from codechat.config import AlgoConfig
from codechat.policy import completion_logprobs
from policy_helpers import tiny_policy


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    return tiny_policy(tmp_path_factory)


def test_groups_equal_rows_and_ignores_padding():
    idx = torch.tensor([0, 0, 0, 1, 0])
    tokens = torch.tensor([[5, 6, 9], [5, 6, 7], [5, 7, 0], [5, 6, 9], [5, 6, 1]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 0]]).float()
    d = find_duplicates(idx, tokens, mask)
    # rows 0, 1, 4 differ only after their last masked-in token; row 2 has other tokens, row 3 another prompt
    assert d.inverse.tolist() == [0, 0, 1, 2, 0] and d.keep.tolist() == [0, 2, 3] and d.counts.tolist() == [3, 1, 1]
    assert d.frac == pytest.approx(2 / 5)
    adv = torch.tensor([1.0, 1.0, 0.0, 0.0, -1.0])  # same tokens, another advantage: not merged
    assert find_duplicates(idx, tokens, mask, adv).inverse.tolist() == [0, 0, 1, 2, 3]


def test_a_hole_in_the_mask_makes_a_row_distinct():
    tokens = torch.tensor([[5, 6, 7], [5, 6, 7]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1]]).float()
    assert find_duplicates(torch.zeros(2, dtype=torch.long), tokens, mask).n_unique == 2


def test_empty_batch_and_bad_shapes():
    d = find_duplicates(torch.zeros(0, dtype=torch.long), torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, 4))
    assert d.n_unique == 0 and d.frac == 0.0
    with pytest.raises(ValueError, match="find_duplicates wants"):
        find_duplicates(torch.zeros(3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 2), min_size=3, max_size=3),
                          st.lists(st.integers(0, 1), min_size=3, max_size=3), st.integers(0, 1)),
                min_size=1, max_size=12))
def test_fuzz_same_group_iff_same_key(rows):
    idx = torch.tensor([r[0] for r in rows])
    tokens = torch.tensor([r[1] for r in rows])
    mask = torch.tensor([r[2] for r in rows]).float()
    adv = torch.tensor([float(r[3]) for r in rows])
    d = find_duplicates(idx, tokens, mask, adv)

    def key(i):
        n = max((t + 1 for t in range(3) if mask[i, t]), default=0)
        return (int(idx[i]), tokens[i, :n].tolist(), mask[i, :n].tolist(), float(adv[i]))

    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (d.inverse[i] == d.inverse[j]) == (key(i) == key(j))
    assert d.counts.sum() == len(rows) and (d.keep[d.inverse] <= torch.arange(len(rows))).all()
    assert [key(int(k)) for k in d.keep] == [key(i) for i in sorted(set(d.keep.tolist()))]


def planted_batch(seed=0):
    """12 rows made of 5 distinct (prompt, completion) rows with multiplicities 4, 1, 3, 2, 2, shuffled."""
    g = torch.Generator().manual_seed(seed)
    T = 8
    base_idx = torch.tensor([0, 0, 1, 2, 2])
    base_tok = torch.randint(4, 1000, (5, T), generator=g)
    lens = torch.tensor([8, 3, 6, 5, 1])
    base_mask = (torch.arange(T)[None] < lens[:, None]).float()
    base_adv = torch.tensor([0.7, -1.2, 0.0, 1.5, -0.4])
    order = torch.tensor([0, 0, 0, 0, 1, 2, 2, 2, 3, 3, 4, 4])[torch.randperm(12, generator=g)]
    tokens = base_tok[order].clone()
    tokens[base_mask[order] == 0] = torch.randint(4, 1000, (int((base_mask[order] == 0).sum()),), generator=g)
    return base_idx[order], tokens, base_mask[order], base_adv[order], order


def loss_and_metrics(model, prompts, idx, tokens, mask, adv, cfg, dedup):
    """The trainer's per-micro-batch loss (policy loss + beta * KL, entropy metric), with or without dedup.
    old, reference and sampler log-probs are the current ones shifted by a fixed per-distinct-row offset, so the
    clip, KL and TIS are all active and duplicate rows share them, as they do in training."""
    d = find_duplicates(idx, tokens, mask, adv)
    if dedup:
        lp_u, ent_u = completion_logprobs(model, prompts, idx[d.keep], tokens[d.keep], mask[d.keep],
                                          with_entropy=True)  # (U, T)
        logp, ent = expand(lp_u, d), expand(ent_u, d)  # (N, T)
    else:
        logp, ent = completion_logprobs(model, prompts, idx, tokens, mask, with_entropy=True)  # (N, T)
    g = torch.Generator().manual_seed(1)
    shift = expand(torch.randn(d.n_unique, tokens.shape[1], generator=g) * 0.3, d)  # (N, T)
    old = (logp.detach() + shift) * mask
    ref = (logp.detach() - 0.5 * shift) * mask
    sampler = (logp.detach() + 0.2 * shift) * mask
    loss, met = policy_loss(cfg.loss, logp, old, adv, mask, cfg, sampler_logp=sampler)
    kl = agg_loss(kl_penalty(logp, ref, cfg.kl_estimator), mask, cfg.agg, cfg.agg_norm)
    loss = loss + cfg.kl_beta * kl
    met.update(kl=kl.item(), loss=loss.item(), entropy=((ent * mask).sum() / mask.sum()).item())
    return loss, met


def run(pol, cfg, dedup):
    prompts = [pol.encode_prompt(s) for s in ["def add(a, b):\n", "x = 1\n", "Write f(s) reversing s.\n"]]
    idx, tokens, mask, adv, _ = planted_batch()
    params = [p for p in pol.model.parameters() if p.requires_grad]
    pol.model.zero_grad()
    loss, met = loss_and_metrics(pol.model, prompts, idx, tokens, mask, adv, cfg, dedup)
    loss.backward()
    grads = [p.grad.clone() for p in params]
    pol.model.zero_grad()
    return met, grads


@pytest.mark.parametrize("agg", list(AGG_MODES))
@pytest.mark.parametrize("loss", list(POLICY_LOSSES))
def test_dedup_equals_naive_for_every_aggregation_and_loss(pol, agg, loss):
    cfg = AlgoConfig(loss=loss, agg=agg, agg_norm=16.0, clip_low=0.2, clip_high=0.28, dual_clip=3.0,
                     tis_cap=1.5, kl_beta=0.1, kl_estimator="k3")
    naive, g_naive = run(pol, cfg, dedup=False)
    dedup, g_dedup = run(pol, cfg, dedup=True)
    assert naive.keys() == dedup.keys()
    for k in naive:
        assert dedup[k] == pytest.approx(naive[k], rel=1e-5, abs=1e-6), k
    assert any(g.abs().max() > 0 for g in g_naive)
    for a, b in zip(g_dedup, g_naive):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("est", list(KL_ESTIMATORS))
def test_dedup_equals_naive_for_every_kl_estimator(pol, est):
    cfg = AlgoConfig(kl_beta=0.5, kl_estimator=est, agg="seq-mean-token-mean")
    naive, g_naive = run(pol, cfg, dedup=False)
    dedup, g_dedup = run(pol, cfg, dedup=True)
    assert dedup["kl"] == pytest.approx(naive["kl"], rel=1e-5, abs=1e-7)
    for a, b in zip(g_dedup, g_naive):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_dedup_runs_the_model_on_distinct_rows_only(pol):
    idx, tokens, mask, adv, order = planted_batch()
    d = find_duplicates(idx, tokens, mask, adv)
    assert d.n_unique == 5 and sorted(d.counts.tolist()) == [1, 2, 2, 3, 4]
    assert (order[d.keep][d.inverse] == order).all()  # each row maps to a copy of its own distinct row
