"""Each aggregation mode against an explicit loop; padding never contributes, not even NaN or inf; turn-mean
weighs every run of unmasked tokens (an episode's turn) the same."""
import pytest
import torch

from codechat.algos import AGG_MODES, UnknownNameError, agg_loss

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "turn-mean"]


def runs(L, mask):
    """The loss values of each maximal run of unmasked tokens, row by row."""
    out = []
    for i in range(L.shape[0]):
        cur = []
        for t in range(L.shape[1]):
            if mask[i, t] > 0:
                cur.append(L[i, t].item())
            elif cur:
                out.append(cur)
                cur = []
        if cur:
            out.append(cur)
    return out


def loop_reference(L, mask, mode, norm):
    B, T = L.shape
    if mode == "turn-mean":
        turns = runs(L, mask)
        return sum(sum(k) / len(k) for k in turns) / len(turns) if turns else 0.0
    tokens = [[L[i, t].item() for t in range(T) if mask[i, t] > 0] for i in range(B)]
    rows = [row for row in tokens if row]
    if not rows:
        return 0.0
    if mode == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in rows) / len(rows)
    return sum(sum(r) for r in rows) / len(rows) / (norm or T)


def batch(seed=0, B=5, T=7):
    g = torch.Generator().manual_seed(seed)
    L = torch.randn(B, T, generator=g)
    lengths = torch.tensor([7, 3, 0, 1, 5])  # one empty row
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()  # (B, T) right padding
    return L, mask


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm", [0.0, 16.0])
def test_mode_matches_loop(mode, norm):
    L, mask = batch()
    assert abs(agg_loss(L, mask, mode, norm).item() - loop_reference(L, mask, mode, norm)) < 1e-5


@pytest.mark.parametrize("mode", MODES)
def test_mode_matches_loop_with_holes(mode):
    """Masks with holes inside rows (an episode's tool results) and rows that end and start unmasked."""
    g = torch.Generator().manual_seed(5)
    L = torch.randn(6, 9, generator=g)
    mask = (torch.rand(6, 9, generator=g) > 0.45).float()
    mask[2] = 0
    mask[0, -1] = mask[1, 0] = 1.0  # a run at the end of one row and one at the start of the next
    assert abs(agg_loss(L, mask, mode, 4.0).item() - loop_reference(L, mask, mode, 4.0)) < 1e-5


def test_turn_mean_weighs_every_turn_the_same_and_never_joins_rows():
    L = torch.tensor([[1.0, 1, 1, 0, 4, 9], [7, 9, 9, 9, 9, 9]])
    mask = torch.tensor([[1.0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 0, 0]])  # turns of 3 and 1 tokens; a 1-token row
    assert agg_loss(L, mask, "turn-mean").item() == pytest.approx((1 + 4 + 7) / 3)
    assert agg_loss(L, mask, "seq-mean-token-mean").item() == pytest.approx(((3 + 4) / 4 + 7) / 2)
    assert agg_loss(L, mask, "token-mean").item() == pytest.approx((3 + 4 + 7) / 5)
    x = L.clone().requires_grad_(True)
    agg_loss(x, mask, "turn-mean").backward()
    want = torch.tensor([[1 / 9, 1 / 9, 1 / 9, 0, 1 / 3, 0], [1 / 3, 0, 0, 0, 0, 0]])
    assert torch.allclose(x.grad, want)  # a 1-token turn weighs as much as a 3-token one
    ends = torch.tensor([[0.0, 1, 1], [1, 0, 0]])  # row 0 ends unmasked, row 1 starts unmasked: two turns
    assert agg_loss(torch.tensor([[0.0, 2, 2], [6, 0, 0]]), ends, "turn-mean").item() == pytest.approx((2 + 6) / 2)


def test_the_modes_weigh_long_sequences_differently():
    L = torch.ones(2, 4)
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 0, 0, 0]])
    assert agg_loss(L, mask, "token-mean").item() == 1.0
    assert agg_loss(L, mask, "seq-mean-token-mean").item() == 1.0
    assert agg_loss(L, mask, "seq-mean-token-sum").item() == 2.5
    assert agg_loss(L, mask, "seq-mean-token-sum-norm", 10).item() == 0.25
    assert agg_loss(L, mask, "turn-mean").item() == 1.0  # no holes: seq-mean-token-mean


@pytest.mark.parametrize("mode", MODES)
def test_padding_never_contributes(mode):
    L, mask = batch(seed=3)
    x = L.clone().requires_grad_(True)
    agg_loss(x, mask, mode, 0).backward()
    junk = torch.full_like(L, float("nan"))
    junk[0::3], junk[1::3] = float("inf"), -1e30
    poisoned = torch.where(mask > 0, L, junk)  # same real tokens, garbage padding
    y = poisoned.clone().requires_grad_(True)
    loss = agg_loss(y, mask, mode, 0)
    loss.backward()
    assert loss.item() == pytest.approx(agg_loss(L, mask, mode, 0).item())
    assert torch.equal(x.grad, y.grad)
    assert (y.grad[mask == 0] == 0).all()


@pytest.mark.parametrize("mode", MODES)
def test_all_masked_is_zero_with_zero_grad(mode):
    x = torch.randn(3, 4, requires_grad=True)
    loss = agg_loss(x, torch.zeros(3, 4), mode)
    loss.backward()
    assert loss.item() == 0.0 and (x.grad == 0).all()


def test_unknown_mode_and_shape_errors():
    with pytest.raises(UnknownNameError, match="seq-mean-token-mean, seq-mean-token-sum"):
        agg_loss(torch.zeros(1, 1), torch.ones(1, 1), "seq-mean")
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        agg_loss(torch.zeros(2, 3), torch.ones(2, 4), "token-mean")
    assert AGG_MODES.names() == sorted(MODES)
