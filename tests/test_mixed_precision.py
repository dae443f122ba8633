"""model.compute_dtype=bfloat16: mixed precision (policy/precision.py), every forward under bf16 autocast over fp32
master weights. Off by default and then a no-op; on, log-probs and weight updates within bf16 tolerance of fp32's
(but not equal: the setting has an effect), the fast path still agrees with the reference path, updates of lr 1e-6
are not lost (they are in pure bf16 weights), activation checkpointing keeps less for the same gradients, and the
config parses (the old rl.autocast_bf16 carried over); on a CPU, oneDNN's per-shape kernel caches stay bounded."""
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from qwen_helpers import qwen_dir
from test_dedup_train import close, config, rollouts, update, vocab

from codechat import CodechatError
from codechat.config import ModelConfig
from codechat.config.io import load_config
from codechat.policy import completion_logprobs, load_policy
from codechat.policy import precision
from codechat.policy.fastlm import usable
from codechat.policy.precision import compute_autocast

ROOT = Path(__file__).resolve().parents[1]


def batch(n_vocab: int):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, n_vocab, (4 + i,), generator=g).tolist() for i in range(3)]
    idx = torch.tensor([0, 0, 1, 1, 2, 2])
    tokens = torch.randint(3, n_vocab, (6, 7), generator=g)  # (N, T)
    mask = (torch.arange(7)[None] < torch.tensor([7, 3, 5, 7, 1, 6])[:, None]).float()  # (N, T)
    return prompts, idx, tokens, mask


def test_off_by_default_is_a_no_op():
    assert ModelConfig().compute_dtype == ""
    for off in ("", "float32"):
        with compute_autocast(off, "cpu"):
            assert not torch.is_autocast_enabled("cpu")
    with compute_autocast("bfloat16", "cpu", torch.bfloat16):  # bf16 weights: nothing to cast
        assert not torch.is_autocast_enabled("cpu")
    with compute_autocast("bfloat16", torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    pol = load_policy(ModelConfig(path="tiny", device="cpu", compute_dtype="bfloat16"))
    with pol.autocast():
        assert torch.is_autocast_enabled("cpu")


def test_logprobs_close_to_fp32_fast_and_reference_agree():
    model = load_policy(config().model).model
    prompts, idx, tokens, mask = batch(model.config.vocab_size)
    exact = completion_logprobs(model, prompts, idx, tokens, mask)  # (N, T) fp32
    with compute_autocast("bfloat16", "cpu"):
        fast = completion_logprobs(model, prompts, idx, tokens, mask, fast=None)
        ref = completion_logprobs(model, prompts, idx, tokens, mask, fast=False)
    assert fast.dtype == torch.float32 and torch.isfinite(fast).all()
    assert ((fast != 0) == (mask > 0)).all()
    assert 0 < (fast - exact).abs().max() < 0.05  # bf16 GEMMs: an effect, within bf16 tolerance
    assert (fast - ref).abs().max() < 0.05  # both paths under autocast (HF's attention in bf16, ours in fp32)


def test_gradients_close_to_fp32():
    model = load_policy(config().model).model
    prompts, idx, tokens, mask = batch(model.config.vocab_size)
    grads = []
    for on in (False, True):
        model.zero_grad()
        with compute_autocast("bfloat16" if on else "", "cpu"):
            lp = completion_logprobs(model, prompts, idx, tokens, mask)
        (lp * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    rel = ((grads[0] - grads[1]).norm() / grads[0].norm()).item()
    assert 0 < rel < 0.05, rel


@pytest.mark.parametrize("epochs,minibatch_size", [(1, 0), (1, 8)])  # (1, 8): the second step needs pi_old's pass
def test_rl_update_close_to_fp32(tmp_path, epochs, minibatch_size):
    r = rollouts(vocab())
    exact, m_exact = update(r, config(epochs=epochs, minibatch_size=minibatch_size), tmp_path)
    cfg = config(epochs=epochs, minibatch_size=minibatch_size)
    cfg.model.compute_dtype = "bfloat16"
    lowp, m_lowp = update(r, cfg, tmp_path)
    if minibatch_size == 0:  # one SGD step of lr 0.5: within 5% of fp32's (a second one amplifies the difference,
        close(lowp, exact, rel=0.05)  # through the clip, to ~25% of the step: bf16 changes which tokens clip)
    assert any((lowp[k] != exact[k]).any() for k in exact)  # the setting is in effect
    assert all(torch.isfinite(v).all() for v in lowp.values())
    assert m_lowp.keys() == m_exact.keys()
    assert m_lowp["loss"] == pytest.approx(m_exact["loss"], rel=0.05, abs=1e-3)


def moved_share(dtype: str, compute: str, lr: float = 1e-6) -> float:
    """Share of the weights that 3 AdamW steps at `lr` change, weights in `dtype`, forwards in `compute`."""
    torch.manual_seed(0)
    pol = load_policy(ModelConfig(path="tiny", device="cpu", dtype=dtype, compute_dtype=compute))
    model = pol.model.train()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95))
    prompts, idx, tokens, mask = batch(model.config.vocab_size)
    for _ in range(3):
        opt.zero_grad()
        with pol.autocast():
            lp = completion_logprobs(model, prompts, idx, tokens, mask)
        (-(lp * mask).sum() / mask.sum()).backward()
        assert all(p.grad.dtype == p.dtype for p in model.parameters())  # fp32 masters get fp32 gradients
        opt.step()
    assert all(s["exp_avg"].dtype == getattr(torch, dtype) for s in opt.state.values())  # moments in the masters' dtype
    moved = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before))
    return moved / sum(b.numel() for b in before)


def test_small_updates_move_fp32_masters_and_are_lost_in_bf16_weights():
    """lr 1e-6: bf16 compute over fp32 masters moves (nearly) every weight; pure bf16 weights keep most as they
    were (the update is under half a bf16 ulp)."""
    mixed, pure = moved_share("float32", "bfloat16"), moved_share("bfloat16", "")
    assert mixed > 0.99 and pure < 0.5, (mixed, pure)


def test_activation_checkpointing_keeps_less_for_the_same_gradients():
    """model.grad_checkpointing: the training forward saves fewer bytes for the backward, the log-probs and the
    gradients are the same (a recompute, not an approximation)."""
    out = {}
    for on in (False, True):
        torch.manual_seed(0)
        pol = load_policy(ModelConfig(path="tiny", device="cpu", grad_checkpointing=on))
        model = pol.model.train()
        prompts, idx, tokens, mask = batch(model.config.vocab_size)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel() * t.element_size()) or t,
                                                      lambda t: t):
            lp = completion_logprobs(model, prompts, idx, tokens, mask)
        (lp * mask).sum().backward()
        out[on] = sum(saved), lp.detach(), [p.grad.clone() for p in model.parameters()]
    (b_off, lp_off, g_off), (b_on, lp_on, g_on) = out[False], out[True]
    assert b_on < 0.7 * b_off, (b_on, b_off)
    assert torch.allclose(lp_on, lp_off, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(g_on, g_off))


def test_config_parses_rejects_bad_values_and_carries_the_old_key_over():
    cfg = load_config(None, ["model.compute_dtype=bfloat16", "model.grad_checkpointing=true"])
    assert cfg.model.compute_dtype == "bfloat16" and cfg.model.grad_checkpointing
    with pytest.raises(CodechatError, match="model.compute_dtype"):
        load_config(None, ["model.compute_dtype=float8"])
    with pytest.warns(UserWarning, match="model.compute_dtype=bfloat16"):
        assert load_config(None, ["rl.autocast_bf16=true"]).model.compute_dtype == "bfloat16"
    assert load_config(None, ["rl.autocast_bf16=false"]).model.compute_dtype == ""
    with pytest.raises(CodechatError, match="autocast_bf16"):
        load_config(None, ["rl.autocast_bf16=maybe"])


def test_refused_on_a_gpu_without_bf16_warned_on_an_emulating_cpu(tmp_path, monkeypatch):
    """A GPU without bf16 stops the run in one line before it claims its directory; a CPU without native bf16
    runs it (a rehearsal) with a warning."""
    monkeypatch.setattr(precision, "bf16_native", lambda device: False)
    precision.check_autocast("", "cuda")  # off: never refused
    with pytest.raises(CodechatError, match=r"model.compute_dtype=bfloat16: cuda has no bf16") as e:
        precision.check_autocast("bfloat16", "cuda")
    assert "\n" not in str(e.value)
    with pytest.warns(UserWarning, match="no native bf16"):
        precision.check_autocast("bfloat16", "cpu")
    monkeypatch.setattr(precision, "bf16_native", lambda device: True)
    precision.check_autocast("bfloat16", "cpu")  # native: silent


def test_fast_path_stays_on_when_first_checked_under_autocast():
    """The fast forward's one-time self-check runs in the weights' precision: a first call from inside bf16
    autocast (the sampler's, under model.compute_dtype) does not turn the fast path (and its fused head) off."""
    model = load_policy(ModelConfig(path="tiny", device="cpu")).model
    with compute_autocast("bfloat16", "cpu"):
        assert usable(model)


GROWTH = """
import os, torch
from codechat.config import ModelConfig
from codechat.policy import load_policy
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
pol = load_policy(ModelConfig(path="tiny", device="cpu", compute_dtype="bfloat16"))
with torch.no_grad(), pol.autocast():
    for n in range(1, 80):  # each length: new GEMM shapes (n rows)
        if n == 20:
            start = rss()
        pol.model(input_ids=torch.ones(1, n, dtype=torch.long))
print(rss() - start)
"""


@pytest.mark.skipif(not precision.bf16_native("cpu"), reason="bf16 matmuls go through oneDNN only with native bf16")
def test_cpu_bf16_kernel_caches_stay_bounded_over_new_shapes():
    """Each new GEMM shape under CPU bf16 compute compiles a oneDNN kernel that its caches keep: with load_policy's
    cap, 60 new sequence lengths leave the process's memory where it was; with oneDNN's default capacity (which
    an environment that sets the variables keeps) they add ~2 MB each."""
    env = {k: v for k, v in os.environ.items() if k not in precision.KERNEL_CACHE_VARS}
    env |= {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "131072"}  # large buffers unmapped when freed

    def growth(**extra) -> float:
        r = subprocess.run([sys.executable, "-c", GROWTH], capture_output=True, text=True, cwd=ROOT,
                           env=env | extra, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return float(r.stdout.split()[-1])
    assert growth() < 10
    assert growth(ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024", LRU_CACHE_CAPACITY="1024") > 40


@pytest.mark.slow
def test_rehearsal_grpo_in_mixed_precision_stays_under_2_gib(tmp_path):
    """configs/qwen-rehearsal.yaml (random Qwen weights, the full 151k vocabulary; no SFT; bf16 compute over fp32
    masters): a GRPO step with its update (a random model passes nothing and writes to the token limit: those
    groups and samples are kept) and its evaluation peaks under 2 GiB of resident memory."""
    model = qwen_dir("qwen2.5")
    run = tmp_path / "run"
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    r = subprocess.run([sys.executable, "-m", "codechat", "train", "--config", str(ROOT / "configs" /
                        "qwen-rehearsal.yaml"), f"model.path={model}", f"run_dir={run}", "rl.steps=1",
                        "rl.zero_variance=keep", "rl.mask_truncated=false",
                        "log.progress=false", "log.plot=false"], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child so far
    assert peak < 2 * 2**20, peak
    cfg = load_config(run / "config.yaml")
    assert cfg.stages == ["grpo"] and cfg.model.compute_dtype == "bfloat16" and cfg.model.dtype == "float32"
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert "skipped_update" not in row and row["loss"] == row["loss"] and before <= peak
