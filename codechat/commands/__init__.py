"""Subcommands of the `codechat` CLI. Each module defines HELP (its one-line help, the only copy),
add_arguments(parser) and run(args) -> int.

Modules import heavy libraries (torch, transformers) inside run(), so `codechat --help` stays fast.
To add a command, add a module here and one line to COMMANDS.
"""

COMMANDS = {  # name: module
    "tasks": "codechat.commands.tasks",
    "verify": "codechat.commands.verify",
    "train": "codechat.commands.train",
    "plot": "codechat.commands.plot",
    "audit": "codechat.commands.audit",
    "eval": "codechat.commands.eval",
    "chat": "codechat.commands.chat",
    "model": "codechat.commands.model",
    "demo": "codechat.commands.demo",
    "compare": "codechat.commands.compare",
}
