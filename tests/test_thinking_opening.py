"""The opening-tag loss (train/opening.py, verifier.thinking.opening_loss): against a slow reference, its gradient
moves mass onto well-formed openings, and the RL loop applies it."""
import json
import math

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat import CodechatError
from codechat.config import ModelConfig
from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.rollout.thinking import tag_ids
from codechat.train import train
from codechat.train.thinking import ThinkingHooks
from codechat.train.opening import allowed_next, opening_loss, opening_positions


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_policy(ModelConfig(path="tiny", device="cpu"))


def paths_of(tok):
    return [tag_ids(tok, t) for t in ("<think></think>", "<think>", "</think>")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=4), min_size=1, max_size=3),
       st.lists(st.integers(0, 4), max_size=6))
def test_positions_match_a_brute_force_over_the_vocabulary(paths, tokens):
    want = []
    for j in range(len(tokens) + 1):
        ok = [a for a in range(5) if any(p[:j + 1] == tokens[:j] + [a] for p in paths)]
        if not ok:
            break
        want.append((j, ok))
    assert opening_positions(tokens, paths) == want
    assert allowed_next(paths, []) == sorted({p[0] for p in paths})


def slow_reference(model, prompts, pidx, tokens, n_tokens, paths, temperature):
    """One forward per sample and position; the allowed set by scanning every token the paths hold."""
    vocab = sorted({a for q in paths for a in q})
    losses, offs = [], []
    for pi, t, n in zip(pidx, tokens, n_tokens):
        t = t[:n]
        terms, off = [], []
        for j in range(n + 1):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompts[pi] + t[:j]])).logits[0, -1].float() / temperature
            p = torch.softmax(logits, -1)
            ok = [a for a in vocab if any(q[:j + 1] == t[:j] + [a] for q in paths)]
            if not ok:
                break
            terms.append(-math.log(p[ok].sum().item()))
            off.append(1 - p[ok].sum().item())
        losses.append(sum(terms) / len(terms))
        offs.append(sum(off) / len(off))
    return sum(losses) / len(losses), sum(offs) / len(offs)


def test_opening_loss_matches_a_slow_reference(tiny):
    tok, model = tiny.tokenizer, tiny.model
    paths = paths_of(tok)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [enc("def f(x):\n    return x\n# answer:"), enc("Write g.")]
    comps = ["<think></think>def f(x): return x", "<think></think>def f(x): return x", "<think>Plan: x</think>code",
             "<thinkwhencethink>\ndef f", "def f(x): return 1", "</think>ok", "<"]
    rows = [(0, c) for c in comps] + [(1, c) for c in comps[2:4]]
    seqs = [enc(c) for _, c in rows]
    T = max(map(len, seqs)) + 2
    tokens = torch.zeros(len(seqs), T, dtype=torch.long)  # (N, T) padded with junk after n_tokens
    for i, s in enumerate(seqs):
        tokens[i, :len(s)] = torch.tensor(s)
        tokens[i, len(s):] = 7
    n = torch.tensor([len(s) for s in seqs])
    pidx = torch.tensor([p for p, _ in rows])
    for temp in (1.0, 0.7):  # the sampling temperature divides the logits
        loss, m = opening_loss(model, prompts, pidx, tokens, n, paths, temp)
        want, off = slow_reference(model, prompts, pidx.tolist(), tokens.tolist(), n.tolist(), paths, temp)
        assert loss.item() == pytest.approx(want, rel=1e-4, abs=1e-5)
        assert m["thinking/opening_offpath_mass"] == pytest.approx(off, abs=1e-5)
        assert 0 < m["thinking/opening_offpath_mass"] < 1 and loss.requires_grad


def test_its_gradient_moves_mass_onto_well_formed_openings(tiny):
    model = load_policy(ModelConfig(path="tiny", device="cpu")).model  # a fresh copy: this test trains it
    paths = paths_of(tiny.tokenizer)
    prompts = [tiny.tokenizer("def f", add_special_tokens=False)["input_ids"]]
    seqs = [paths[0], paths[1] + [5, 5]]  # the empty block, a plan
    T = max(map(len, seqs))
    tokens = torch.tensor([s + [9] * (T - len(s)) for s in seqs])  # (2, T)
    n = torch.tensor([len(s) for s in seqs])
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    offs = []
    for _ in range(4):
        opt.zero_grad()
        loss, m = opening_loss(model, prompts, torch.tensor([0, 0]), tokens, n, paths)
        loss.backward()
        opt.step()
        offs.append(m["thinking/opening_offpath_mass"])
    assert offs[0] > 0.5 and offs[-1] < offs[0] - 0.2  # an untrained model: nearly all mass off the paths


RL = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "log.progress=false", "log.plot=false",
      "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=4", "checkpoint.every=0", "rl.steps=3",
      "verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5", "rl.lr=1e-2",
      "rewards.components={pass-all: 1.0, nothink-bonus: 0.2}", "rl.zero_variance=keep", "eval.every=0",
      "rl.warmup=0"]  # three steps at the full lr: the opening loss must show within them


@pytest.mark.slow  # ~15 s on the shared machine: one 3-step RL run
def test_the_rl_loop_adds_the_opening_loss_and_it_lowers_the_off_path_mass(tmp_path):
    run = tmp_path / "r"
    train(load_config(None, RL + [f"run_dir={run}", "verifier.thinking.opening_loss=5.0"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    on = [m["thinking/opening_offpath_mass"] for m in rows]  # measured before each step's update
    assert len(on) == 3 and on[2] < on[1] < on[0] and on[0] - on[2] > 0.005, on  # untrained: ~all off the paths
    assert rows[0]["thinking/opening_loss"] > 0


def test_opening_loss_values_are_checked():
    with pytest.raises(CodechatError, match="opening_loss: expected >= 0"):
        load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.opening_loss=-1"])
    with pytest.raises(CodechatError, match="opening_loss > 0 needs verifier.thinking.enabled"):
        load_config(None, ["verifier.thinking.opening_loss=0.5"])


def test_the_hook_adds_coef_times_the_loss_gradient_and_nothing_when_off(tiny):
    enc = lambda t: tiny.tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    seqs = [enc("<think></think>def f"), enc("<thinkXthink>def f")]
    T = max(map(len, seqs))
    batch = SimpleNamespace(prompt_index=torch.tensor([0, 0]), n_tokens=torch.tensor([len(x) for x in seqs]),
                            tokens=torch.tensor([x + [0] * (T - len(x)) for x in seqs]))  # (2, T)
    r = SimpleNamespace(prompts=[enc("def f")], batch=batch)
    grads = {}
    for coef in (0.0, 1.0, 3.0):
        cfg = load_config(None, ["verifier.thinking.enabled=true", f"verifier.thinking.opening_loss={coef}"])
        hooks = ThinkingHooks(SimpleNamespace(cfg=cfg, policy=tiny, state=SimpleNamespace(extra={}), eval_tasks=[]))
        tiny.model.zero_grad(set_to_none=True)
        m = hooks.opening_grad(tiny.model, r, torch.arange(2), 1.0)
        g = tiny.model.get_input_embeddings().weight.grad
        grads[coef] = None if g is None else g.clone()
        assert (m == {}) == (coef == 0)
    assert grads[0.0] is None  # off: no forward, no gradient
    # fp32 sums over the layers round differently at 3x the scale: absolute tolerance relative to the largest entry
    tol = 1e-5 * float(grads[3.0].abs().max())
    assert torch.allclose(grads[3.0], 3 * grads[1.0], rtol=1e-4, atol=tol) and grads[1.0].abs().sum() > 0
