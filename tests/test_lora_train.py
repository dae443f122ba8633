"""LoRA as a user expects it: checkpoints hold the adapters in PEFT's format (no merged copy, no deep copy at save
time), a resumed run loads the base and the adapters so the KL reference stays the base model, resume is exact,
the adapted modules are selectable, and `codechat model export` alone writes a merged model. Tiny preset, CPU."""
import json
import shutil

import pytest
import torch

from codechat import CodechatError
from codechat.cli import main
from codechat.config import ModelConfig
from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.train import train
from codechat.train.checkpoint import Checkpointer
from test_train import BASE, sft_model  # noqa: F401  (the module fixture)

pytest.importorskip("peft")

LORA = ["stages=[grpo]", "model.lora_r=4", "model.lora_alpha=8", "rl.steps=4", "rl.lr=5e-3", "checkpoint.every=1",
        "checkpoint.keep_last=10", "algo.kl_beta=0.04", "rl.zero_variance=keep"]


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def adapters(model_dir):
    from safetensors.torch import load_file
    return load_file(str(model_dir / "adapter_model.safetensors"))


def test_checkpoints_hold_adapters_and_resume_is_exact(tmp_path, sft_model, monkeypatch):  # noqa: F811
    from peft.tuners.tuners_utils import BaseTuner

    def no_merge(self, *a, **k):
        raise AssertionError("a merged copy was made during training")

    monkeypatch.setattr(BaseTuner, "merge_and_unload", no_merge)  # checkpoints never merge
    args = BASE + [f"model.path={sft_model}", *LORA]
    straight, halted = tmp_path / "straight", tmp_path / "halted"
    train(load_config(None, args + [f"run_dir={straight}"]))
    train(load_config(None, args + [f"run_dir={halted}"]))
    ck = halted / "checkpoints"
    for d in sorted(ck.iterdir())[2:]:  # as if killed after step 2
        shutil.rmtree(d)
    train(resume=halted)
    model_dir = Checkpointer(straight).latest() / "model"
    names = {p.name for p in model_dir.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= names
    assert "model.safetensors" not in names and "config.json" not in names
    cfg = json.loads((model_dir / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["base_model_name_or_path"] == str(sft_model.resolve())
    full = (sft_model / "model.safetensors").stat().st_size
    assert (model_dir / "adapter_model.safetensors").stat().st_size < full / 5
    a, b = adapters(model_dir), adapters(ck / "step-0000004" / "model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    keys = ("loss", "kl", "reward_mean", "grad_norm", "entropy")
    ms, mh = metrics(straight), metrics(halted)
    assert [r["step"] for r in mh] == [1, 2, 3, 4]
    for x, y in zip(ms, mh):
        assert {k: x.get(k) for k in keys} == {k: y.get(k) for k in keys}
    assert ms[-1]["kl"] > 0  # the adapters moved away from the base: the reference is the base, also after resume


def test_target_modules_are_selectable_and_a_bad_name_fails_in_one_line():
    pol = load_policy(ModelConfig(path="tiny", device="cpu", lora_r=4, lora_targets=["q_proj", "v_proj"]))
    wrapped = {n.split(".")[-1] for n, m in pol.model.named_modules() if hasattr(m, "lora_A")}
    assert wrapped == {"q_proj", "v_proj"}
    every = load_policy(ModelConfig(path="tiny", device="cpu", lora_r=4))
    assert {n.split(".")[-1] for n, m in every.model.named_modules() if hasattr(m, "lora_A")} > wrapped
    with pytest.raises(CodechatError, match=r"model.lora_targets=\['nope'\]") as e:
        load_policy(ModelConfig(path="tiny", device="cpu", lora_r=4, lora_targets=["nope"]))
    assert "\n" not in str(e.value)


def test_an_adapter_checkpoint_loads_merged_and_exports_merged(tmp_path):
    pol = load_policy(ModelConfig(path="tiny", device="cpu", lora_r=4))
    with torch.no_grad():
        for n, p in pol.model.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = pol.model(input_ids=ids).logits
    pol.save(tmp_path / "ad")
    merged = load_policy(ModelConfig(path=str(tmp_path / "ad"), device="cpu"))  # eval, chat, sample: merged
    assert not hasattr(merged.model, "peft_config")
    with torch.no_grad():
        assert torch.allclose(merged.model(input_ids=ids).logits, want, atol=1e-5)
    assert main(["model", "export", str(tmp_path / "ad"), "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file() and not (tmp_path / "hf" / "adapter_config.json").exists()
