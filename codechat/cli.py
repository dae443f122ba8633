"""The `codechat` command line: a thin dispatcher over codechat/commands/*.

Only the module of the command being run is imported (the command list and its help come from the COMMANDS
registry), so `codechat --help` stays fast however heavy a command's imports are.
User errors (CodechatError) print as one line `codechat: error: ...` and exit with status 2; no traceback; so does
a full disk (ENOSPC, EDQUOT).
"""
from __future__ import annotations

import argparse
import errno
import importlib
import sys

from codechat import CodechatError, __version__
from codechat.commands import COMMANDS


TOUR = ("codechat demo", "codechat tasks show ../shared/data/mbpp/mbpp.jsonl --limit 2",
        "codechat verify --tasks T.jsonl --completions C.jsonl --out R.jsonl",
        "codechat train --config configs/sft.yaml", "codechat train --config configs/grpo.yaml run_dir=runs/g1",
        "codechat eval --model runs/g1 --tasks builtin:synthetic-heldout", "codechat chat runs/g1")
"""The path from clone to a trained, evaluated model one can talk to, shown under `codechat --help`."""


def _examples(lines) -> str | None:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) if lines else None


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
        prog="codechat", description="Post-train code models with RL from executable rewards.",
        epilog=_examples(TOUR), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"codechat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = chosen_command(argv)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help, epilog=_examples(cmd.examples),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == chosen:
            importlib.import_module(cmd.module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args, rest = parser.parse_known_args(argv)
    if rest and isinstance(getattr(args, "overrides", None), list) and \
            all("=" in a and not a.startswith("-") for a in rest):
        args.overrides += rest  # KEY=VALUE after a flag (`train --force seed=3`): argparse stops the list at the flag
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return int(importlib.import_module(COMMANDS[args.command].module).run(args) or 0)
    except CodechatError as e:
        print(f"codechat: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk mid-run: one line (checkpoint writes say more: train/checkpoint.py)
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"codechat: error: {e.filename or 'writing'}: {e.strerror}; free some space (a training run "
              f"continues with codechat train --resume RUN_DIR from its last complete checkpoint)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("codechat: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
