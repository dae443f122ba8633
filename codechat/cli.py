"""The `codechat` command line: a thin dispatcher over codechat/commands/*.

Only the module of the command being run is imported (the command list and its help come from the COMMANDS
registry), so `codechat --help` stays fast however heavy a command's imports are.
User errors (CodechatError) print as one line `codechat: error: ...` and exit with status 2; no traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from codechat import CodechatError, __version__
from codechat.commands import COMMANDS


def chosen_command(argv: list[str]) -> str | None:
    """The command named on the command line, if any: the top level has only flags, so it is the first word."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; only the chosen command's subparser gets its arguments (and imports its module)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="codechat", description="Post-train code models with RL from executable rewards."
    )
    parser.add_argument("--version", action="version", version=f"codechat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = chosen_command(argv)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        if name == chosen:
            importlib.import_module(cmd.module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return int(importlib.import_module(COMMANDS[args.command].module).run(args) or 0)
    except CodechatError as e:
        print(f"codechat: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("codechat: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
