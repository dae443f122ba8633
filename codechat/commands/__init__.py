"""Subcommands of the `codechat` CLI: one module each, defining add_arguments(parser) and run(args) -> int.

The one-line help of each command lives here, not in its module, so that `codechat --help` imports no command
module at all: the dispatcher (codechat/cli.py) imports only the module of the command being run. Command
modules therefore import what they need at the top; `codechat train --help` loads what `codechat train` loads
(torch included), `codechat --help` loads none of it (`python bench/cli_startup.py` measures both).
To add a command, add a module here and one line to COMMANDS.
"""
from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    module: str
    help: str
    examples: tuple[str, ...] = ()
    """Shown under `codechat COMMAND --help`: the command lines the README promises for it."""


COMMANDS = {
    "tasks": Command("codechat.commands.tasks", "inspect a task file: format, count, fields, examples, warnings",
                    ("codechat tasks show ../shared/data/mbpp/mbpp.jsonl --limit 2", "codechat tasks list")),
    "verify": Command("codechat.commands.verify",
                      "run completions against task tests in the sandbox (verdicts as JSONL), or replay known attacks",
                    ("codechat verify --tasks T.jsonl --completions C.jsonl --out R.jsonl", "codechat verify --regress tests/attacks/attacks.jsonl", "codechat verify --check")),
    "train": Command("codechat.commands.train",
                     "train a policy: sft, rft, grpo, rloo, dpo stages from a YAML config (resumable)",
                    ("codechat train --config configs/grpo.yaml run_dir=runs/g1 rl.steps=100", "codechat train --config configs/grpo.yaml --dry-run", "codechat train --config configs/grpo.yaml --print-config",
                     "codechat train --resume runs/g1")),
    "plot": Command("codechat.commands.plot",
                    "plot a run's curves (reward, pass rate, eval, KL, entropy, lengths) to a PNG",
                    ("codechat plot runs/g1",)),
    "audit": Command("codechat.commands.audit", "review a run's flagged and top-reward samples (reward-hack audit)",
                    ("codechat audit runs/g1",)),
    "eval": Command("codechat.commands.eval",
                    "evaluate pass@k of a model or of a completions file; compare two evaluations",
                    ("codechat eval --model runs/x --tasks builtin:synthetic-heldout --n 10 --k 1,5,10", "codechat eval --completions samples.jsonl --tasks ../shared/data/mbpp/mbpp.jsonl", "codechat eval --compare runs/a/eval/synthetic-heldout runs/b/eval/synthetic-heldout",
                    "codechat eval --endpoint http://localhost:8000 --model NAME --tasks builtin --n 10 --k 1,10")),
    "chat": Command("codechat.commands.chat",
                    "chat with a model in the terminal; /run and /test its answers in the sandbox",
                    ("codechat chat runs/demo", 'codechat chat runs/demo --once "Write fizzbuzz(n)."')),
    "model": Command("codechat.commands.model",
                     "create a built-in preset model, describe, export or sample from a model",
                    ("codechat model create tiny --out models/tiny", "codechat model info models/tiny",
                     "codechat model export runs/demo --out exported/demo")),
    "demo": Command("codechat.commands.demo",
                    "train a tiny code model from scratch on CPU: SFT on buggy code, then RFT + GRPO from the verifier",
                    ("codechat demo", "codechat demo --agent", "codechat demo --seeds 0,1,2")),
    "serve": Command("codechat.commands.serve", "serve the verifier over HTTP: SandboxFusion-compatible /run_code, "
                     "batch /verify, /health, /metrics",
                    ("codechat serve --port 8080", "codechat serve --host 0.0.0.0 --port 8080 --token T")),
    "repo": Command("codechat.commands.repo_env", "build or check test environments for repository tasks "
                    "(repo env build SPEC --out DIR, repo env check DIR)",
                    ("codechat repo env build bench/swebench_envs.json --out envs/", "codechat repo env check envs/")),
    "probe": Command("codechat.commands.probe", "the placebo control of an RL stage: N steps with the real "
                     "advantages and with them shuffled, train pass@k, KL and entropy, real - placebo",
                    ("codechat probe --model RUN --demo tiny --steps 20 --out runs/probe",)),
    "compare": Command("codechat.commands.compare", "compare GRPO, RLOO, RFT, RFT->GRPO and DPO from one SFT "
                       "checkpoint: pass-rate curves over sample budgets",
                    ("codechat compare --preset curves",)),
}
