"""The `codechat` command line: a thin dispatcher over codechat/commands/*.

User errors (CodechatError) print as one line `codechat: error: ...` and exit with status 2; no traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from codechat import CodechatError, __version__
from codechat.commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codechat", description="Post-train code models with RL from executable rewards."
    )
    parser.add_argument("--version", action="version", version=f"codechat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        p.set_defaults(_module=module)
        mod.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except CodechatError as e:
        print(f"codechat: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("codechat: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
