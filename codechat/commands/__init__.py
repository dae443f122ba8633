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


COMMANDS = {
    "tasks": Command("codechat.commands.tasks", "inspect a task file: format, count, fields, examples, warnings"),
    "verify": Command("codechat.commands.verify",
                      "run completions against task tests in the sandbox (verdicts as JSONL), or replay known attacks"),
    "train": Command("codechat.commands.train",
                     "train a policy: sft, rft, grpo, rloo, dpo stages from a YAML config (resumable)"),
    "plot": Command("codechat.commands.plot",
                    "plot a run's curves (reward, pass rate, eval, KL, entropy, lengths) to a PNG"),
    "audit": Command("codechat.commands.audit", "review a run's flagged and top-reward samples (reward-hack audit)"),
    "eval": Command("codechat.commands.eval",
                    "evaluate pass@k of a model or of a completions file; compare two evaluations"),
    "chat": Command("codechat.commands.chat",
                    "chat with a model in the terminal; /run and /test its answers in the sandbox"),
    "model": Command("codechat.commands.model",
                     "create a built-in preset model, describe a model directory, or sample from a model"),
    "demo": Command("codechat.commands.demo",
                    "train a tiny code model from scratch on CPU: SFT on buggy code, then RFT + GRPO from the verifier"),
    "serve": Command("codechat.commands.serve", "serve the verifier over HTTP: SandboxFusion-compatible /run_code, "
                     "batch /verify, /health, /metrics"),
    "repo": Command("codechat.commands.repo_env", "build or check test environments for repository tasks "
                    "(repo env build SPEC --out DIR, repo env check DIR)"),
    "compare": Command("codechat.commands.compare", "compare GRPO, RLOO, RFT, RFT->GRPO and DPO from one SFT "
                       "checkpoint: pass-rate curves over sample budgets"),
}
