"""Subcommands of the `codechat` CLI. Each module defines HELP (its one-line help, the only copy),
add_arguments(parser) and run(args) -> int.

Modules import the rest of codechat inside run() (all but `codechat`, `codechat.config` and `codechat.rundir`,
which the CLI loads anyway), so `codechat --help` stays fast: 1.6 s as is, 22.8 s with those imports at the top,
3.2 s with only the ones that need neither torch nor matplotlib (`python bench/cli_startup.py`, medians of 3,
2 cores under load ~11).
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
