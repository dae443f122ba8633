"""Subcommands of the `codechat` CLI. Each module defines HELP, add_arguments(parser) and run(args) -> int.

Modules import heavy libraries (torch, transformers) inside run(), so `codechat --help` stays fast.
To add a command, add a module here and one line to COMMANDS.
"""

COMMANDS = {
    # name: (module, one-line help)
    "tasks": ("codechat.commands.tasks", "inspect a task file: format, count, fields, examples, warnings"),
    "model": ("codechat.commands.model", "create a preset model, describe a model directory, sample from a model"),
}
