"""VLLMSampler on the Qwen-shaped rehearsal model (`codechat model create qwen2.5 --head-dim 32`: Qwen's 151,936-token
vocabulary, its special tokens and ChatML template, random weights) against plain PyTorch forwards of the same
Hugging Face model, before and after a weight push. Prints one JSON line for test_vllm_qwen.py.

    .venv-vllm/bin/python tests_vllm/qwen_driver.py OUT_DIR
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from codechat.config import RolloutConfig, SamplingConfig
from codechat.policy.vllm_engine import VLLMSampler
from driver import ref_greedy, ref_logprobs, rows

MESSAGES = [[{"role": "user", "content": "Write a function add(a, b) that returns a + b."}],
            [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Reverse a list."}]]


def main(out: Path) -> dict:
    model_dir = out / "qwen"
    subprocess.run([sys.executable, "-m", "codechat", "model", "create", "qwen2.5", "--out", str(model_dir),
                    "--head-dim", "32"], check=True, capture_output=True, text=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True) for m in MESSAGES]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
    cfg = RolloutConfig(engine="vllm", vllm_dtype="float32", vllm_max_model_len=256, vllm_kv_cache_gib=0.25)
    s = VLLMSampler(model_dir, cfg, SamplingConfig())
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=12)
    r: dict = {"vocab": len(tok), "config_vocab": model.config.vocab_size,
               "head_dim": model.config.hidden_size // model.config.num_attention_heads,
               "im_start": tok.convert_tokens_to_ids("<|im_start|>"), "prompts": prompts,
               "engine_start_s": round(s.engine_start_s, 2)}
    g = s.sample(prompts, 1, greedy)
    r["greedy"] = {"rows": rows(g), "ref": [ref_greedy(model, p, 12) for p in prompts],
                   "logprobs": [g.logprobs[i, : int(g.n_tokens[i])].tolist() for i in range(len(prompts))]}
    r["greedy"]["ref_logprobs"] = [ref_logprobs(model, p, x) for p, x in zip(prompts, r["greedy"]["ref"])]
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    t0 = time.perf_counter()
    s.update_weights(model)
    r["push_s"] = round(time.perf_counter() - t0, 2)
    g2 = s.sample(prompts, 1, greedy)
    r["push"] = {"rows": rows(g2), "ref": [ref_greedy(model, p, 12) for p in prompts]}
    return r


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/codechat-vllm-qwen")
    print(json.dumps(main(out)))
