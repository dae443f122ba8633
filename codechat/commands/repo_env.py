"""`codechat repo env build SPEC --out DIR` and `codechat repo env check DIR`: test environments for repository
tasks (a venv per repository and version, pip from the configured index); format in verifier/repo_env.py."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codechat import CodechatError
from codechat.verifier.repo_env import EnvError, build_env, check_env, load_envs, load_specs


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", required=True)
    env = sub.add_parser("env", help="build or check test environments").add_subparsers(dest="action", required=True)
    b = env.add_parser("build", help="create a venv per spec entry under --out and pip-install its requirements")
    b.add_argument("spec", help="JSON list of {repo, version, python, requirements, pythonpath, offline_skip}")
    b.add_argument("--out", required=True, help="directory receiving one environment per entry")
    b.add_argument("--only", default="", help="build only the entries whose repo@version contains this text")
    c = env.add_parser("check", help="run each environment's python and pytest once")
    c.add_argument("dir", help="directory of built environments")


def run(args) -> int:
    if args.action == "build":
        specs = [e for e in load_specs(args.spec) if args.only in e.key]
        if not specs:
            raise CodechatError(f"{args.spec}: no environment matches --only {args.only!r}")
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        failed = 0
        for env in specs:
            try:
                built = build_env(env, out)
                print(f"{env.key}: built in {built.dir} ({check_env(built)})")
            except EnvError as e:
                failed += 1
                print(f"error: {e}", file=sys.stderr)
        print(f"{len(specs) - failed}/{len(specs)} environments built in {out}")
        return 1 if failed else 0
    envs = load_envs(args.dir)
    if not envs:
        raise CodechatError(f"{args.dir}: no environments (directories with env.json)")
    bad = 0
    for key, env in envs.items():
        try:
            print(f"{key}: ok ({check_env(env)}) {env.dir}")
        except EnvError as e:
            bad += 1
            print(f"{key}: error: {e}")
    return 1 if bad else 0
