"""The weight names VLLMSampler.update_weights hands to vLLM: pure PyTorch, no vLLM needed (that is tests_vllm/)."""
from __future__ import annotations

import pytest
import torch

from codechat.policy.vllm_engine import hf_weights


def tiny_qwen2(tie: bool = True):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, vocab_size=50, tie_word_embeddings=tie)
    return Qwen2ForCausalLM(cfg).eval()


def checkpoint_names(model, tmp_path) -> set[str]:
    from safetensors import safe_open

    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        return set(f.keys())


@pytest.mark.parametrize("tie", [True, False])
def test_names_are_checkpoint_names_plus_the_tied_head(tmp_path, tie):
    model = tiny_qwen2(tie)
    names = dict(hf_weights(model))
    assert set(names) == checkpoint_names(model, tmp_path) | {"lm_head.weight"}
    assert len(list(hf_weights(model))) == len(names)  # no duplicates
    assert (names["lm_head.weight"].data_ptr() == names["model.embed_tokens.weight"].data_ptr()) == tie
    assert not any(t.requires_grad for t in names.values())


def test_wrappers_are_unwrapped():
    model = tiny_qwen2()

    class DDPLike(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    plain = [n for n, _ in hf_weights(model)]
    assert [n for n, _ in hf_weights(DDPLike(model))] == plain
    assert [n for n, _ in hf_weights(torch.compile(model))] == plain  # compiles nothing until called


def test_lora_is_folded_in_under_base_names_without_touching_the_model():
    peft = pytest.importorskip("peft")
    model = tiny_qwen2()
    x = torch.randint(0, 50, (1, 5))
    plain = {k: v.clone() for k, v in hf_weights(model)}
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))
    with torch.no_grad():
        want = lora(x).logits
    folded = {k: v.clone() for k, v in hf_weights(lora)}
    assert set(folded) == set(plain)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(folded[q], plain[q])  # the adapter's delta is in
    assert torch.equal(folded["model.layers.0.mlp.up_proj.weight"], plain["model.layers.0.mlp.up_proj.weight"])
    assert torch.equal(lora.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight, plain[q])
    fresh = tiny_qwen2()
    fresh.load_state_dict({k: v for k, v in folded.items()}, strict=False)
    with torch.no_grad():
        assert torch.allclose(fresh(x).logits, want, atol=1e-5)  # folded weights = the LoRA model
