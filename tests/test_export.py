"""`codechat model export`: a clean Hugging Face directory that plain transformers loads, whose chat template
renders the training prompt, and which generates the same greedy tokens as codechat's sampler (LoRA merged)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from codechat.cli import main
from codechat.config import ModelConfig, SamplingConfig
from codechat.config.io import load_config
from codechat.export import export
from codechat.policy import Sampler, load_policy
from codechat.rollout.collect import prompt_text
from codechat.tasks import Task
from codechat.train import train

Q = "Write a function `f(x)` that returns x plus one."


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("exp") / "r"
    train(load_config(None, ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "data.eval=builtin:toy",
                             "data.max_eval_tasks=2", "eval.n=1", "sampling.max_new_tokens=10",
                             "log.progress=false", "log.plot=false", "verifier.workers=1", "stages=[sft]",
                             "sft.steps=3", "sft.batch_size=4", f"run_dir={d}"]))
    return d


def hf_greedy(path, messages, n=10):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                  return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, do_sample=False, max_new_tokens=n)
    return tok, ids["input_ids"][0].tolist(), out[0, ids["input_ids"].shape[1]:].tolist()


def test_export_loads_in_transformers_and_generates_the_same_greedy_tokens(run, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["model", "export", str(run), "--out", str(out)]) == 0
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "README.md"} <= \
        {p.name for p in out.iterdir()}
    assert not any(p.name in ("trainer.pt", "state.json") for p in out.iterdir())
    policy = load_policy(ModelConfig(path=str(run), device="cpu"))
    prompt = policy.encode_prompt(prompt_text(Task("t", Q, [])))
    tok, hf_prompt, hf_new = hf_greedy(out, [{"role": "user", "content": Q}])
    assert hf_prompt == prompt  # the bundled template renders the training prompt
    ours = Sampler(policy).sample([prompt], 1, SamplingConfig(temperature=0, max_new_tokens=10))
    n = int(ours.n_tokens[0])
    assert hf_new[:n] == ours.tokens[0, :n].tolist()
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["max_new_tokens"] == 10 and sorted(gen["eos_token_id"]) == list(policy.eos_token_ids)
    card = (out / "README.md").read_text()
    assert "stages: sft" in card and "raw continuation" in card and "| sft | 3 |" in card


def test_export_merges_lora(run, tmp_path):
    pytest.importorskip("peft")
    from codechat.policy.hf import load_policy as lp
    policy = lp(ModelConfig(path=str(run), device="cpu", lora_r=4))
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)  # adapters that change the output
    src = tmp_path / "lora_src"
    shutil.copytree(run, src, symlinks=True)
    model_dir = (src / "final").resolve()
    shutil.rmtree(model_dir)
    policy.save(model_dir)  # what the checkpointer writes for a LoRA run: the adapters alone, naming their base
    assert (model_dir / "adapter_config.json").is_file() and not (model_dir / "model.safetensors").exists()
    out = tmp_path / "hf"
    assert main(["model", "export", str(src), "--out", str(out)]) == 0
    merged = load_policy(ModelConfig(path=str(src), device="cpu"))
    prompt = merged.encode_prompt(prompt_text(Task("t", Q, [])))
    _, _, hf_new = hf_greedy(out, [{"role": "user", "content": Q}], n=6)
    with torch.no_grad():
        ref = policy.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=6)[0, len(prompt):]
    assert hf_new[:len(ref)] == ref.tolist()
    assert not any("lora" in k for k in json.loads((out / "config.json").read_text()))


def test_export_refuses_a_non_empty_out(run, tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("")
    assert main(["model", "export", str(run), "--out", str(tmp_path / "x")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err

def test_export_creates_missing_parent_directories(run, tmp_path):
    out = export(str(run), tmp_path / "exported" / "demo")  # the README's `--out exported/demo` on a fresh clone
    assert (out / "config.json").is_file()
