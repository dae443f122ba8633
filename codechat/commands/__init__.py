"""Subcommands of the `codechat` CLI. Each module defines HELP, add_arguments(parser) and run(args) -> int.

Modules import heavy libraries (torch, transformers) inside run(), so `codechat --help` stays fast.
To add a command, add a module here and one line to COMMANDS.
"""

COMMANDS = {
    # name: (module, one-line help)
    "tasks": ("codechat.commands.tasks", "inspect a task file: format, count, fields, examples, warnings"),
    "verify": ("codechat.commands.verify", "run completions against task tests in the sandbox, or replay attacks"),
    "train": ("codechat.commands.train", "train a policy: sft, rft, grpo, rloo, dpo stages from a YAML config"),
    "plot": ("codechat.commands.plot", "plot a run's curves to a PNG"),
    "audit": ("codechat.commands.audit", "review a run's flagged and top-reward samples (reward-hack audit)"),
    "eval": ("codechat.commands.eval", "evaluate pass@k of a model or a completions file; compare two evaluations"),
    "chat": ("codechat.commands.chat", "chat with a model in the terminal; /run and /test its answers in the sandbox"),
    "model": ("codechat.commands.model", "create a preset model, describe a model directory, sample from a model"),
    "demo": ("codechat.commands.demo", "train a tiny code model from scratch on CPU and show RL lifting its pass rate"),
    "compare": ("codechat.commands.compare", "compare RL algorithms from one SFT checkpoint at an equal sample budget"),
}
