"""`codechat model export RUN --out DIR`: a run's checkpoint as a clean Hugging Face model directory.

    codechat model export runs/demo --out exported/demo              # final checkpoint
    codechat model export runs/demo --out exported/demo-best --checkpoint best

The directory holds the weights (LoRA merged: checkpoints are saved merged, and a PEFT model is merged here
too), config.json, the tokenizer, `chat_template.jinja`, `generation_config.json` and a model card (README.md)
with the training summary. What a user of transformers or vLLM gets is what the run trained on:

- chat template: a run with `model.chat: true` keeps the tokenizer's template. A raw-continuation run
  (`model.chat: false`, the default) gets a template that renders exactly the training prompt: the user message
  continued as is, newline-terminated (rollout.collect.prompt_text), no role markers, so `apply_chat_template`
  with one user message equals codechat's prompt token for token (tested).
- generation config: EOS ids of the policy, pad id, and the run's sampling settings (temperature, top_p, top_k,
  max_new_tokens; greedy when temperature is 0).
- model card: base model, stages and their steps, task sets, prompt format, and the last evaluation of each
  stage from metrics.jsonl.
Not copied: optimizer state, metrics, rollouts (they stay in the run directory).
"""
from __future__ import annotations

import json
from pathlib import Path

from codechat import CodechatError, __version__
from codechat.config import ModelConfig
from codechat.policy import load_policy
from codechat.policy.presets import save_tokenizer
from codechat.io.rundir import find_run, resolve_model, run_config, run_prompt_format, section
from codechat.io.runlog import read_metrics

RAW_TEMPLATE = ("{{- BOS -}}{%- for m in messages -%}{%- if m['role'] == 'user' -%}{{- m['content'] -}}"
                "{%- if not m['content'].endswith('\\n') -%}{{- '\\n' -}}{%- endif -%}"
                "{%- elif m['role'] == 'assistant' -%}{{- m['content'] + '\\n' -}}{%- endif -%}{%- endfor -%}")


def raw_template(tok) -> str:
    """A chat template that renders a conversation the way a raw-continuation run posed tasks."""
    ids = tok("x", add_special_tokens=True)["input_ids"]
    bos = tok.bos_token if tok.bos_token_id is not None and ids and ids[0] == tok.bos_token_id else ""
    return RAW_TEMPLATE.replace("{{- BOS -}}", "{{- " + json.dumps(bos) + " -}}" if bos else "")


def model_card(run: Path | None, cfg: dict | None, fmt: str | None, source: str) -> str:
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation", "tags: [codechat, code, rl]",
             "---", "", f"# {run.name if run else Path(source).name}", "",
             f"Exported by codechat {__version__} from `{source}`.", ""]
    if cfg:
        m, d = section(cfg, "model"), section(cfg, "data")
        lines += [f"- base model: `{m.get('path')}`" + (f" (LoRA r={m['lora_r']}, merged)" if m.get("lora_r") else ""),
                  f"- stages: {', '.join(cfg.get('stages') or [])}", f"- training tasks: `{d.get('train')}`"
                  + (f", SFT data `{d['sft']}`" if d.get("sft") else ""),
                  f"- evaluation tasks: `{d.get('eval') or 'none'}`", f"- seed: {cfg.get('seed')}"]
    lines += ["- prompt format: " + {"chat": "chat template, one user turn",
                                      "raw": "raw continuation: the task text, newline-terminated, continued by the "
                                             "model; the bundled chat template renders exactly that"}.get(
        fmt, "as the source model's"), ""]
    rows = []
    if run is not None and (run / "metrics.jsonl").is_file():
        last: dict[str, dict] = {}
        for r in read_metrics(run):
            if "eval/pass@1" in r:
                last.pop(r.get("stage"), None)
                last[r.get("stage")] = r
        rows = [(st, r) for st, r in last.items()]
    if rows:
        keys = sorted({k for _, r in rows for k in r if k.startswith("eval")})
        lines += ["## Training summary (last evaluation of each stage)", "",
                  "| stage | step | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
        for st, r in rows:
            lines.append(f"| {st} | {r['step']} | " + " | ".join(
                f"{r[k]:.1%}" if isinstance(r.get(k), (int, float)) else "–" for k in keys) + " |")
        lines.append("")
    lines += ["## Use", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
              "tok = AutoTokenizer.from_pretrained(PATH); model = AutoModelForCausalLM.from_pretrained(PATH)",
              "ids = tok.apply_chat_template([{'role': 'user', 'content': 'Write add(a, b).'}],",
              "                              add_generation_prompt=True, return_tensors='pt', return_dict=True)",
              "print(tok.decode(model.generate(**ids)[0][ids['input_ids'].shape[1]:], skip_special_tokens=True))",
              "```", ""]
    return "\n".join(lines)


def export(source: str, out: str | Path, which: str = "final") -> Path:
    """Write the model of `source` (a run dir, RUN/final|best, or a model dir) to `out` (new or empty; missing
    parent directories are created)."""
    from transformers import GenerationConfig  # transformers: heavy, loaded only when a model is exported

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CodechatError(f"--out {out}: exists and is not empty; export into a new directory")
    path = resolve_model(source, which)
    cfg, fmt = run_config(path), run_prompt_format(path)  # fmt None: not from a run, keep its template
    policy = load_policy(ModelConfig(path=path, device="cpu"))
    model, tok = policy.model, policy.tokenizer
    if hasattr(model, "merge_and_unload"):  # a PEFT model: fold the adapters in
        model = model.merge_and_unload()
    if fmt == "raw":
        tok.chat_template = raw_template(tok)
    sa = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 128, **section(cfg, "sampling")}
    greedy = not sa["temperature"]
    gen = GenerationConfig(eos_token_id=list(policy.eos_token_ids), pad_token_id=tok.pad_token_id,
                           max_new_tokens=int(sa["max_new_tokens"]), do_sample=not greedy,
                           **({} if greedy else {"temperature": float(sa["temperature"]), "top_p": float(sa["top_p"]),
                                                 "top_k": int(sa["top_k"])}))
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = gen
    model.save_pretrained(out)
    save_tokenizer(tok, out)
    gen.save_pretrained(out)
    (out / "README.md").write_text(model_card(find_run(path), cfg, fmt, source))
    return out
