"""Exercise VLLMSampler on a tiny random Qwen2 model and print one JSON line of observations for the tests.

Run with the vLLM venv's python (the engine is created under `__main__`, as vLLM requires):
    .venv-vllm/bin/python tests_vllm/driver.py OUT_DIR
Each check records raw results (token ids, log-probs, reference values from a plain PyTorch forward); the
assertions live in test_vllm_engine.py so a failure names the property that broke.
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch

CORPUS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n",
          "class Stack:\n    def push(self, x):\n        self.items.append(x)\n"] * 40


def build_model(out: Path):
    """Byte-level BPE (EOS = id 0) + a random 2-layer Qwen2 (head_dim 32: vLLM's CPU attention needs >= 32)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=384, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=256, vocab_size=len(tok), max_position_embeddings=256,
                      tie_word_embeddings=True, initializer_range=0.2, eos_token_id=tok.eos_token_id,
                      bos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = Qwen2ForCausalLM(cfg).eval()
    model.save_pretrained(out)
    return tok, model


@torch.no_grad()
def ref_logprobs(model, prompt: list[int], completion: list[int], temperature: float = 1.0,
                 top_k: int = 0) -> list[float]:
    """Log-probs of `completion` after `prompt` under softmax(logits / T) kept to the top k: a plain forward."""
    ids = torch.tensor([prompt + completion])
    logits = model(ids).logits[0, len(prompt) - 1: -1].float() / (temperature or 1.0)  # (C, V)
    if top_k:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (C, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None])[:, 0].tolist()


@torch.no_grad()
def ref_greedy(model, prompt: list[int], steps: int) -> list[int]:
    """Greedy continuation by repeated full forwards (no cache, no generate())."""
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def rows(batch) -> list[list[int]]:
    return [batch.tokens[i, : int(batch.n_tokens[i])].tolist() for i in range(len(batch.texts))]


def main(out: Path) -> dict:
    from codechat.config import RolloutConfig, SamplingConfig
    from codechat.policy.vllm_engine import VLLMSampler

    threads = torch.get_num_threads()
    model_dir = out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    tok, model = build_model(model_dir)
    prompts = [tok(t)["input_ids"] for t in ("def add(a, b):", "for i in", "class Stack:")]
    cfg = RolloutConfig(engine="vllm", vllm_dtype="float32", vllm_max_model_len=256, vllm_kv_cache_gib=0.0625)
    s = VLLMSampler(model_dir, cfg, SamplingConfig())
    r: dict = {"engine_start_s": round(s.engine_start_s, 2), "eos_id": tok.eos_token_id, "pad_id": s.pad_id}

    # 1. sampling at T=1: shapes, fields, log-probs vs a plain forward
    warm = time.perf_counter()
    hot = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=7)
    b = s.sample(prompts, 3, hot)
    r["first_sample_s"] = round(time.perf_counter() - warm, 2)
    r["batch"] = {"prompt_index": b.prompt_index.tolist(), "tokens_shape": list(b.tokens.shape),
                  "mask": b.mask.tolist(), "logprobs": b.logprobs.tolist(), "n_tokens": b.n_tokens.tolist(),
                  "finish_reason": b.finish_reason, "texts": b.texts, "rows": rows(b),
                  "dtypes": [str(b.tokens.dtype), str(b.prompt_index.dtype), str(b.n_tokens.dtype)],
                  "padded": b.tokens[b.mask == 0].tolist(),
                  "decoded": [tok.decode(x, skip_special_tokens=True) for x in rows(b)]}
    r["batch"]["ref_logprobs"] = [ref_logprobs(model, prompts[int(b.prompt_index[i])], x)
                                  for i, x in enumerate(rows(b))]
    # 2. temperature 0.7 with top-k 5: log-probs of the processed distribution
    b7 = s.sample(prompts[:1], 2, SamplingConfig(temperature=0.7, max_new_tokens=10, seed=1))
    r["tempered"] = {"logprobs": [b7.logprobs[i, : int(b7.n_tokens[i])].tolist() for i in range(2)],
                     "ref": [ref_logprobs(model, prompts[0], x, 0.7) for x in rows(b7)]}
    bk = s.sample(prompts[:1], 4, SamplingConfig(temperature=1.0, top_k=5, max_new_tokens=10, seed=2))
    r["top_k"] = {"logprobs": [bk.logprobs[i, : int(bk.n_tokens[i])].tolist() for i in range(4)],
                  "ref": [ref_logprobs(model, prompts[0], x, top_k=5) for x in rows(bk)],
                  "untruncated": [ref_logprobs(model, prompts[0], x) for x in rows(bk)]}
    # 3. seeded reproducibility
    r["repro"] = {"again": rows(s.sample(prompts, 3, hot)) == r["batch"]["rows"],
                  "other_seed": rows(s.sample(prompts, 3, SamplingConfig(temperature=1.0, max_new_tokens=12,
                                                                          seed=8))) != r["batch"]["rows"]}
    # 4. greedy, n=2, vs reference greedy; then a stop string taken from the greedy text
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=12)
    g = s.sample(prompts, 2, greedy)
    r["greedy"] = {"rows": rows(g), "ref": [ref_greedy(model, p, 12) for p in prompts],
                   "finish_reason": g.finish_reason, "logprobs": [g.logprobs[i, :12].tolist() for i in (0, 2, 4)]}
    r["greedy"]["ref_logprobs"] = [ref_logprobs(model, p, x) for p, x in zip(prompts, r["greedy"]["ref"])]
    text = g.texts[0]
    stop = text[len(text) // 2: len(text) // 2 + 2] if len(text) >= 4 else ""
    bs = s.sample(prompts[:1], 1, SamplingConfig(temperature=0.0, max_new_tokens=12, stop=[stop]))
    r["stop"] = {"stop": stop, "full_text": text, "text": bs.texts[0], "finish_reason": bs.finish_reason[0],
                 "n_tokens": int(bs.n_tokens[0])}
    # 5. weight push: perturb the HF model, push, greedy must follow the new weights
    old = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    s.update_weights(model)
    g2 = s.sample(prompts, 1, greedy)
    r["push"] = {"push_s": round(s.last_push_s, 3), "rows": rows(g2),
                 "ref": [ref_greedy(model, p, 12) for p in prompts], "before": r["greedy"]["ref"],
                 "logprobs": [g2.logprobs[i, :12].tolist() for i in range(len(prompts))]}
    r["push"]["ref_logprobs"] = [ref_logprobs(model, p, x) for p, x in zip(prompts, r["push"]["ref"])]
    # 6. EOS: a zero final norm makes every logit 0, so greedy picks id 0 = EOS at once
    with torch.no_grad():
        model.model.norm.weight.zero_()
    s.update_weights(model)
    e = s.sample(prompts[:1], 1, greedy)
    r["eos"] = {"rows": rows(e), "finish_reason": e.finish_reason[0], "text": e.texts[0],
                "mask": e.mask.tolist(), "logprob": float(e.logprobs[0, 0]), "vocab": len(tok)}
    # 7. round trip: the original weights give the original greedy output again
    model.load_state_dict(old)
    s.update_weights(model)
    r["restore"] = rows(s.sample(prompts, 1, greedy)) == [x for i, x in enumerate(rows(g)) if i % 2 == 0]
    # 8. throughput: 8 prompts x 4 samples x 64 tokens, T=1, no stop
    big = [p * 2 for p in prompts] + prompts + prompts[:2]
    t0 = time.perf_counter()
    tb = s.sample(big, 4, SamplingConfig(temperature=1.0, max_new_tokens=64, seed=3))
    dt = time.perf_counter() - t0
    r["throughput"] = {"samples": len(tb.texts), "tokens": int(tb.n_tokens.sum()), "seconds": round(dt, 2),
                       "tokens_per_s": round(int(tb.n_tokens.sum()) / dt, 1)}
    torch.set_num_threads(threads)  # still a working call after the engine started
    r["threads"] = [threads, torch.get_num_threads()]
    return r


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/codechat-vllm-driver")
    t0 = time.perf_counter()
    result = main(out)
    result["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x))
