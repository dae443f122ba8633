"""Policies: presets round-trip through transformers, load errors name the input, prompts, save, LoRA reference."""
import json

import pytest
import torch

from codechat import CodechatError
from codechat.config import ModelConfig
from codechat.policy import build_preset, completion_logprobs, load_policy, reference
from policy_helpers import TINY, tiny_dir, tiny_policy


def test_preset_round_trips_through_from_pretrained(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = tiny_dir(tmp_path_factory)
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "generation_config.json"]:
        assert (d / f).is_file(), f
    model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tok.pad_token_id is not None and tok.eos_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert json.loads((d / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    code = "def add(a, b):\n    return a + b\n"
    assert tok.decode(tok(code)["input_ids"]) == code
    assert len(tok(code)["input_ids"]) < len(code) / 2  # BPE learned code fragments
    ids = torch.tensor([tok(code)["input_ids"]])
    pol = load_policy(ModelConfig(path=str(d), device="cpu"))
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, pol.model(ids).logits, atol=1e-5)


def test_preset_build_is_deterministic(tmp_path):
    a = build_preset("tiny", tmp_path / "a", seed=3, **TINY)
    b = build_preset("tiny", tmp_path / "b", seed=3, **TINY)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_preset_name_builds_into_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path))
    pol = load_policy(ModelConfig(path="tiny", device="cpu"))
    n = sum(p.numel() for p in pol.model.parameters())
    assert 1e6 <= n <= 5e6, n
    (built,) = (tmp_path / "presets").iterdir()
    assert built.name.startswith("tiny-")
    mtime = (built / "model.safetensors").stat().st_mtime
    load_policy(ModelConfig(path="tiny", device="cpu"))
    assert (built / "model.safetensors").stat().st_mtime == mtime


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(CodechatError, match="no such model directory"):
        load_policy(ModelConfig(path=str(tmp_path / "nope")))


def test_directory_without_config_is_not_a_model(tmp_path):
    (tmp_path / "README.md").write_text("hello")
    with pytest.raises(CodechatError, match="not a model directory"):
        load_policy(ModelConfig(path=str(tmp_path)))


def test_non_causal_lm_is_rejected(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    with pytest.raises(CodechatError, match="not a causal LM"):
        load_policy(ModelConfig(path=str(tmp_path)))


def test_missing_tokenizer_is_a_clear_error(tmp_path_factory, tmp_path):
    d = tiny_dir(tmp_path_factory)
    for f in ["config.json", "model.safetensors"]:
        (tmp_path / f).write_bytes((d / f).read_bytes())
    with pytest.raises(CodechatError, match="tokenizer"):
        load_policy(ModelConfig(path=str(tmp_path)))


def test_tokenizer_without_pad_gets_eos_as_pad(tmp_path_factory, tmp_path, caplog):
    d = tiny_dir(tmp_path_factory)
    for f in d.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg.pop("pad_token")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    pol = load_policy(ModelConfig(path=str(tmp_path), device="cpu"))
    assert pol.tokenizer.pad_token_id == pol.tokenizer.eos_token_id
    assert "no pad token" in caplog.text


def test_bad_dtype_names_the_value():
    with pytest.raises(CodechatError, match="float64"):
        load_policy(ModelConfig(path="tiny", dtype="float64"))


def test_encode_prompt_plain_and_chat(tmp_path_factory):
    plain = tiny_policy(tmp_path_factory)
    chat = tiny_policy(tmp_path_factory, chat=True)
    text = "Write a function `add(a, b)`."
    assert plain.decode(plain.encode_prompt(text)) == text
    ids = chat.encode_prompt(text)
    raw = chat.tokenizer.decode(ids)
    assert raw.startswith("<|im_start|>user\n" + text) and raw.endswith("<|im_start|>assistant\n")
    assert chat.decode(ids).strip().endswith("assistant")  # markers dropped, roles kept
    assert set(plain.eos_token_ids) == {plain.tokenizer.eos_token_id,
                                        plain.tokenizer.convert_tokens_to_ids("<|im_end|>")}


def test_save_round_trips(tmp_path_factory, tmp_path):
    from transformers import AutoModelForCausalLM

    pol = tiny_policy(tmp_path_factory)
    with torch.no_grad():
        pol.model.model.norm.weight.mul_(1.5)  # "trained"
    pol.save(tmp_path / "ckpt")
    again = load_policy(ModelConfig(path=str(tmp_path / "ckpt"), device="cpu"))
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt", local_files_only=True)
    ids = torch.tensor([pol.encode_prompt("def f(x):")])
    with torch.no_grad():
        ref = pol.model(ids).logits
        assert torch.allclose(again.model(ids).logits, ref, atol=1e-5)
        assert torch.allclose(hf(ids).logits, ref, atol=1e-5)


def test_lora_reference_is_the_base_model(tmp_path_factory, tmp_path):
    pytest.importorskip("peft")
    base = tiny_policy(tmp_path_factory)
    pol = tiny_policy(tmp_path_factory, lora_r=4)
    trainable = [n for n, p in pol.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():
        for n, p in pol.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)  # adapters now change the output
    prompts = [base.encode_prompt("def f(x):"), base.encode_prompt("x = 1")]
    idx = torch.tensor([0, 0, 1])
    tokens = torch.randint(5, 500, (3, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 6)
    with torch.no_grad():
        want = completion_logprobs(base.model, prompts, idx, tokens, mask)
        tuned = completion_logprobs(pol.model, prompts, idx, tokens, mask)
        with reference(pol.model):
            ref = completion_logprobs(pol.model, prompts, idx, tokens, mask)
            ref_slow = completion_logprobs(pol.model, prompts, idx, tokens, mask, fast=False)
        tuned_slow = completion_logprobs(pol.model, prompts, idx, tokens, mask, fast=False)
    assert (tuned - want).abs().max() > 1e-3
    assert (ref - want).abs().max() < 1e-5 and (ref_slow - want).abs().max() < 1e-5
    assert (tuned - tuned_slow).abs().max() < 1e-4
    pol.save(tmp_path / "merged")  # merged copy; the live model keeps its adapters
    merged = load_policy(ModelConfig(path=str(tmp_path / "merged"), device="cpu"))
    with torch.no_grad():
        got = completion_logprobs(merged.model, prompts, idx, tokens, mask)
    assert (got - tuned).abs().max() < 1e-4


def test_logprob_gradients_are_bitwise_reproducible_with_shuffled_rows(tmp_path_factory):
    """A minibatch of a permutation (prompt index unsorted) on 2 threads: the same gradients, bit for bit, every
    time. With `k[index]` the prompt KV's gradient was summed in a thread-dependent order, so two runs of the
    same GRPO config drifted apart (the demo's GRPO gain ranged 8-25 points between identical runs)."""
    import hashlib
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = tiny_policy(tmp_path_factory).model
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, 500, (30 + i,), generator=g).tolist() for i in range(16)]
        index = torch.arange(16).repeat_interleave(8)[torch.randperm(128, generator=g)]
        tokens, mask = torch.randint(3, 500, (128, 40), generator=g), torch.ones(128, 40)
        digests = set()
        for _ in range(3):
            model.zero_grad()
            completion_logprobs(model, prompts, index, tokens, mask, fast=True).sum().backward()
            digests.add(hashlib.sha1(b"".join(p.grad.numpy().tobytes() for p in model.parameters())).digest())
        assert len(digests) == 1
    finally:
        torch.set_num_threads(threads)
