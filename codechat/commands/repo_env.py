"""`codechat repo env build SPEC|RECORDS --out DIR` and `codechat repo env check DIR`: test environments for
repository tasks. SPEC: codechat's format (verifier/repo_env.py, a venv per entry, pip from the configured index);
RECORDS: a SWE-bench record set (Lite/Verified JSON or JSONL), one environment per (repo, version) built from the
official specs with `--mirrors DIR` holding the repositories' git mirrors (verifier/swebench_env.py)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from codechat import CodechatError
from codechat.tasks.loaders import read_records
from codechat.tasks.model import TaskFormatError
from codechat.verifier.repo_env import (EnvError, build_env, check_env, load_envs, load_offline_marks, load_specs,
                                        set_offline_skip)
from codechat.verifier.swebench_env import build_swebench_env
from codechat.verifier.swebench_spec import group_records, parse_as_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", required=True)
    env = sub.add_parser("env", help="build or check test environments").add_subparsers(dest="action", required=True)
    b = env.add_parser("build", help="create a venv per spec entry (or per repo@version of SWE-bench records)")
    b.add_argument("spec", help="JSON list of {repo, version, python, requirements, pythonpath, offline_skip}, "
                                "or SWE-bench records (instance_id, repo, version, base_commit, ...)")
    b.add_argument("--out", required=True, help="directory receiving one environment per entry")
    b.add_argument("--only", default="", help="build only the entries whose repo@version contains this text")
    b.add_argument("--mirrors", help="SWE-bench records: directory of git mirrors (owner__name, owner+name/repo)")
    b.add_argument("--keep", action="store_true", help="SWE-bench records: skip environments already built")
    b.add_argument("--as-of", default="records", help="SWE-bench records: resolve packages as uploaded before this "
                   "date (ISO 8601), 'records' (the newest created_at of each version's records) or 'none' (today)")
    b.add_argument("--sources", help="SWE-bench records: directory of the library sources a repository's build "
                   "downloads, used instead (matplotlib: freetype at the version its setupext.py names, as a git "
                   "mirror of freetype/freetype or an extracted freetype-VERSION/ tree); without it, the system's")
    b.add_argument("--offline-skip", metavar="FILE", help="SWE-bench records: the tests that need the internet, "
                   "which the sandbox lacks: a JSON list of {repo, version, offline_skip: {test id: reason}} (an "
                   "environment spec serves; its other fields are not used), kept in each environment's env.json: an "
                   "instance needing one of them to pass is not judged, a PASS_TO_PASS one is left out")
    c = env.add_parser("check", help="run each environment's python (and pytest) once")
    c.add_argument("dir", help="directory of built environments")


def _records(path: str) -> list[dict] | None:
    """The records of a SWE-bench record set, or None when the file is a codechat environment spec."""
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        try:
            data = [r for _, r in read_records(Path(path).expanduser())]
        except TaskFormatError:
            return None
    if isinstance(data, list) and data and all(isinstance(r, dict) and "instance_id" in r for r in data):
        return data
    return None


def _build_swebench(records: list[dict], args) -> int:
    if not args.mirrors:
        raise CodechatError(f"{args.spec}: SWE-bench records need --mirrors DIR (git mirrors of the repositories)")
    groups = {k: v for k, v in group_records(records).items() if args.only in f"{k[0]}@{k[1]}"}
    if not groups:
        raise CodechatError(f"{args.spec}: no repo@version matches --only {args.only!r}")
    try:
        parse_as_of(args.as_of, [])
    except EnvError as e:
        raise CodechatError(str(e)) from None
    sources = Path(args.sources).expanduser().resolve() if args.sources else None
    if sources is not None and not sources.is_dir():
        raise CodechatError(f"--sources {args.sources}: no such directory")
    marks = _offline_marks(args.offline_skip, groups) if args.offline_skip else {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for (repo, version), recs in sorted(groups.items()):
        d = out / f"{repo.replace('/', '__')}-{version}"
        if args.keep and (d / "env.json").is_file():
            if args.offline_skip:  # the marks given now replace those it was built with
                set_offline_skip(d, marks.get(f"{repo}@{version}", {}))
            print(f"{repo}@{version}: kept {d}")
            continue
        t0 = time.monotonic()
        try:
            built = build_swebench_env(repo, version, recs, Path(args.mirrors).expanduser(), out, as_of=args.as_of,
                                       sources=sources, offline_skip=marks.get(f"{repo}@{version}"))
            print(f"{repo}@{version}: built in {time.monotonic() - t0:.0f}s ({len(recs)} records; "
                  f"{check_env(built)}) {built.dir}")
        except (EnvError, OSError) as e:
            failed += 1
            print(f"error: {e}" if isinstance(e, EnvError) else f"error: {repo}@{version}: {e}", file=sys.stderr)
    print(f"{len(groups) - failed}/{len(groups)} environments built in {out}")
    return 1 if failed else 0


def _offline_marks(path: str, groups: dict) -> dict[str, dict[str, str]]:
    """The --offline-skip file's marks by repo@version, read before anything is built; marks for a version of a
    repository being built that the records lack are named (a misspelt version would silently judge nothing)."""
    try:
        marks = load_offline_marks(path)
    except EnvError as e:
        raise CodechatError(f"--offline-skip: {e}") from None
    repos = {repo for repo, _ in groups}
    for key in sorted(set(marks) - {f"{r}@{v}" for r, v in groups}):
        if key.split("@")[0] in repos:
            print(f"--offline-skip {path}: {key}: no records of this version (its marks are not used)",
                  file=sys.stderr)
    return marks


def run(args) -> int:
    if args.action == "build":
        records = _records(args.spec)
        if records is not None:
            return _build_swebench(records, args)
        if args.offline_skip:
            raise CodechatError(f"--offline-skip is for SWE-bench records; {args.spec} gives each environment's "
                                f"offline_skip itself")
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
