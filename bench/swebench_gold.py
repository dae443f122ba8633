"""SWE-bench Lite through the repository judge: gold patches must resolve, empty and wrong ones must not.

    python bench/swebench_gold.py --static
        the judge's rules over all 300 Lite records (no environment needed): how many records could never
        resolve, and why (an id style no adapter matches, a gold edit dropped as shadowing or protected, a gold
        line refused by the hazard scan, a data file run as a test).
    python bench/swebench_gold.py --envs DIR [--trees ../shared/data/repo/swebench] [--log-dir LOGS] [--warm]
        judges, for each instance with a tree, the gold patch, an empty patch and a wrong one (the gold with its
        largest change block undone; see `wrong_variants`) and an attack (`PLUGIN`: no fix, every test made a
        no-op by a plugin registered through pytest's own objects), with the environments built by
        `codechat repo env build bench/swebench_envs.json --out DIR`. An instance any of whose FAIL_TO_PASS tests
        needs the internet (marked `offline_skip` in bench/swebench_envs.json) is not judged: the JSON line lists
        it under "skipped" with the reason.
    python bench/swebench_gold.py --all --envs ENVS --mirrors /work/.mirror [--per-repo N] [--out RESULTS.jsonl]
        every record whose repo@version has an environment built from the official specs (`codechat repo env
        build RECORDS --mirrors DIR --out ENVS`), trees from the git mirrors at each base commit: per repository,
        instances, environments built, gold / empty / wrong resolved, env errors, median seconds of a gold
        judgement and the environments' build seconds (their manifests). --per-repo N: the first N instances of
        each repository (in record order); --ids, --kinds: a rerun of some. "wrong": the gold with one change
        block undone, largest block first (passing over one that undoes only docstrings or comments: the
        gold's program), up to --wrong-tries variants until one does not resolve; the variants
        that still resolved are counted (`wrong_blocks_unneeded`: blocks the tests do not need), an instance
        where all do is in `wrong_resolved_ids`. An instance some of whose FAIL_TO_PASS tests need the internet
        (the environment's `offline_skip`, from `repo env build --offline-skip FILE`), or some of whose ids name
        files of the machine the record was made on (`repo_suite.machine_paths`: they resolve nowhere), is not
        judged: its repository lists it under "skipped" with the reason. One result line per judgement goes to
        --out as it is made.
Ends with one JSON line of figures.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codechat.tasks.repo import RepoTask, _str_list  # noqa: E402
from codechat.tasks.repo_loaders import from_swebench  # noqa: E402
from codechat.verifier.patches import Hunk, apply_diff, parse_diff  # noqa: E402
from codechat.verifier.repo import RepoJudge  # noqa: E402
from codechat.verifier.repo_env import load_envs  # noqa: E402
from codechat.verifier.repo_suite import unjudgeable_reason  # noqa: E402
from codechat.verifier.repo_rules import drop_reason, hazard, matches, test_targets, well_formed  # noqa: E402

DATA = Path(os.environ.get("CODECHAT_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data") / "repo"


def static_reasons(rec: dict) -> set[str]:
    """Why a record could never resolve under the judge's rules, whatever the environment (empty: it can)."""
    task = RepoTask(rec["instance_id"], "", files={"_": ""})
    why = set()
    gold = parse_diff(rec["patch"])
    existing = {fp.path for fp in gold if not fp.is_new}  # the tree is not at hand: what the gold edits exists
    tops = {"/".join(p.split("/")[:2] if p.startswith("src/") else p.split("/")[:1]) for p in existing}
    for fp in gold:
        r = drop_reason(fp.path, task.is_protected, lambda top: top in tops)
        if r:
            why.add("shadow" if r.startswith("shadows") else "protected")
        if any(h_ for h in fp.hunks for l in h.lines if l[0] == "+" and (h_ := hazard(fp.path, l[1:]))):
            why.add("hazard_scan")
    tp = [fp.path for fp in parse_diff(rec["test_patch"])]
    if any(not p.endswith(".py") for p in test_targets(tp)):
        why.add("data_file_run")
    targets = test_targets(tp)
    for t in record_ids(rec, "FAIL_TO_PASS") + record_ids(rec, "PASS_TO_PASS"):
        if well_formed(t) and not _adaptable(t, targets):
            why.add("id_style")
    return why


def _adaptable(t: str, targets: list[str]) -> bool:
    """Some test the runner collects could match id `t`: a node id (whole or cut at a space) of a file the runner
    is given, a unittest id whose module is one of those files; bare names and docstring lines are matched
    against every collected test, so only the run can tell."""
    if "::" in t:
        path = t.split("::", 1)[0]
        return path in targets and (matches(t, t) or matches(t, t + "x]"))
    m = re.fullmatch(r"(\w+) \(([\w.]+)\)", t)
    if m:
        dotted = m[2][:-len(m[1]) - 1] if m[2].endswith("." + m[1]) and m[2].count(".") >= 2 else m[2]
        mod, _, cls = dotted.rpartition(".")
        # collected from a target file, or defined in `mod` and imported into one (the runner reports the module)
        return any(matches(t, f"{p}::{cls}::{m[1]}") or matches(t, f"{p}::{cls}::{m[1]}", module=mod)
                   for p in targets)
    return True


def run_static(records: list[dict]) -> dict:
    reasons, bad = Counter(), 0
    for rec in records:
        why = static_reasons(rec)
        bad += bool(why)
        reasons.update(why)
    return {"records": len(records), "never_resolve": bad, **{f"never_{k}": v for k, v in sorted(reasons.items())}}


def change_blocks(patch: str) -> list[tuple[int, int, int]]:
    """The gold's change blocks, largest first: (file index, hunk index, first line) of each maximal run of '-'
    and '+' lines inside a hunk (a hunk's context lines separate its blocks); size is the run's line count."""
    blocks = []
    for i, fp in enumerate(parse_diff(patch)):
        for j, h in enumerate(fp.hunks):
            k = 0
            while k < len(h.lines):
                if h.lines[k][0] == " ":
                    k += 1
                    continue
                end = next((e for e in range(k, len(h.lines)) if h.lines[e][0] == " "), len(h.lines))
                blocks.append((end - k, i, j, k))
                k = end
    return [(i, j, k) for _, i, j, k in sorted(blocks, key=lambda b: (-b[0], b[1:]))]


def without_block(patch: str, block: tuple[int, int, int]) -> str:
    """The gold patch with one change block undone (its '-' lines kept as context, its '+' lines dropped), as a
    unified diff; a file left with no change is left out (a new file is then not created)."""
    out = []
    for i, fp in enumerate(parse_diff(patch)):
        hunks = []
        for j, h in enumerate(fp.hunks):
            lines = list(h.lines)
            if (i, j) == block[:2]:
                k, end = block[2], block[2]
                while end < len(lines) and lines[end][0] != " ":
                    end += 1
                lines[k:end] = [" " + l[1:] for l in lines[k:end] if l[0] == "-"]
            if any(l[0] != " " for l in lines):
                hunks.append(Hunk(h.old_start, h.old_len, h.new_start, sum(l[0] != "-" for l in lines), lines))
        if not hunks:
            continue
        out.append(f"--- {'/dev/null' if fp.is_new else 'a/' + fp.path}\n"
                   f"+++ {'/dev/null' if fp.is_delete else 'b/' + fp.path}\n")
        for h in hunks:
            out.append(f"@@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@\n")
            out.extend(line + "\n" for line in h.lines)
    return "".join(out)


def _code(text: str | None, path: str) -> str | None:
    """A file's program: for Python, its syntax tree without docstrings (comments never reach it); else the text."""
    if text is None or not path.endswith(".py"):
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            body[0] = ast.Pass()
    return ast.dump(tree)


def wrong_variants(patch: str, tries: int, read=None) -> list[str]:
    """Up to `tries` wrong changes: the gold without one change block, largest block first. A gold of one block
    has one: the base itself (the empty change). With `read` (a base file's text by path), a variant whose
    program is the gold's (it undoes docstring or comment lines only) is passed over, unless every one is."""
    variants = [without_block(patch, b) for b in change_blocks(patch)]
    if read is not None:
        gold = apply_diff(patch, read)
        code = {p: _code(t, p) for p, t in gold.items()}
        differ = []
        for v in variants:
            mine = apply_diff(v, read) if v else {}
            if any(_code(mine[p] if p in mine else read(p), p) != c for p, c in code.items()):
                differ.append(v)
        variants = differ or variants
    return variants[:tries]


def _read_commit(task) -> object:
    """A reader of the task's base files (`git show` from its mirror), or None for a plain tree."""
    if not task.commit:
        return None

    def read(path: str) -> str | None:
        res = subprocess.run(["git", "-C", task.repo_dir, "show", f"{task.commit}:{path}"], capture_output=True)
        return res.stdout.decode("utf-8", errors="replace") if res.returncode == 0 else None
    return read


def record_ids(rec: dict, key: str) -> list[str]:
    """A record's FAIL_TO_PASS or PASS_TO_PASS ids: JSON text (Lite, Verified) or a list (the dev records)."""
    return _str_list(rec.get(key) or [], key, str(rec.get("instance_id")))


def skip_reason(rec: dict, envs: dict) -> str | None:
    """Why an instance is not judged, as the judge would answer it (`unjudgeable_reason`): a FAIL_TO_PASS test
    of it is marked `offline_skip` in its environment, or some of its ids name files of the machine the record
    was made on; or None."""
    env = envs.get(f"{rec['repo']}@{rec['version']}")
    return unjudgeable_reason(rec["repo"], record_ids(rec, "FAIL_TO_PASS"), record_ids(rec, "PASS_TO_PASS"), env)


def run_live(records: list[dict], trees: Path, envs_dir: str, log_dir: str | None, warm: bool = False) -> dict:
    envs = load_envs(envs_dir)
    have = [r for r in records if (trees / f"{r['instance_id']}.tar.gz").is_file()]
    fig, skipped = Counter(), {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in have:
            with tarfile.open(trees / f"{r['instance_id']}.tar.gz") as tf:
                tf.extractall(Path(tmp) / r["instance_id"], filter="data")
        with RepoJudge(envs=envs, log_dir=log_dir, warm=warm) as judge:
            for r in have:
                why = skip_reason(r, envs)
                if why:
                    skipped[r["instance_id"]] = why
                    print(f"{r['instance_id']:<24} skipped: {why}", file=sys.stderr)
                    continue
                task = from_swebench(r, r["instance_id"], tmp)
                kinds = [("gold", r["patch"]), ("empty", ""), ("wrong", wrong_variants(r["patch"], 1)[0])]
                kinds += [("plugin", _plugin_change(r["patch"], judge.base(task)))]
                for kind, patch in kinds:
                    t0 = time.monotonic()
                    v = judge.judge(task, patch)
                    fig[f"{kind}_resolved"] += v.passed
                    fig["env_errors"] += v.status == "env_error"
                    print(f"{r['instance_id']:<24} {kind:<5} {v.status:<9} {time.monotonic() - t0:5.1f}s "
                          f"{v.message[:150]}", file=sys.stderr)
    return {"instances": len(have) - len(skipped), "skipped": skipped, "gold_resolved": fig["gold_resolved"], "empty_resolved": fig["empty_resolved"],
            "wrong_resolved": fig["wrong_resolved"], "plugin_resolved": fig["plugin_resolved"],
            "env_errors": fig["env_errors"], "warm": warm}


PLUGIN = ("\nimport sys as _s, types as _t\n_m = _t.ModuleType('helper')\n"
          "setattr(_m, 'pytest_' + 'pyfunc_call', lambda pyfuncitem: True)\n"
          "for _f in _s.meta_path:\n    if getattr(_f, 'config', None) is not None:\n"
          "        _f.config.pluginmanager.register(_m, 'helper')\n        break\n")
"""An attacker's change: no fix, and every test function made a no-op by a plugin registered through pytest's
assertion-rewrite hook (a module without `__file__`), with every name the text scan looks for built at run time."""


def _plugin_change(gold: str, base: Path) -> dict:
    """{path: text}: the package `__init__.py` of the gold's first file, with `PLUGIN` appended."""
    first = parse_diff(gold)[0].path.split("/")
    init = "/".join(first[:2] if first[0] == "src" else first[:1]) + "/__init__.py"
    return {init: (base / init).read_text(encoding="utf-8") + PLUGIN}


def summarize(lines: list[dict], records: list[dict], envs: dict) -> dict:
    """Per repository: instances judged, environments built, gold/empty/wrong resolved, env errors, why each gold
    did not resolve, median seconds of a gold judgement, build seconds (manifests); from the judgement lines
    (`--out`), so a stopped run still gives its figures (`--summarize FILE`)."""
    lines = list({(l["instance_id"], l["kind"]): l for l in lines}.values())  # a rerun's line replaces the earlier
    repo_of = {r["instance_id"]: r["repo"] for r in records}
    versions: dict[str, set] = {}
    for r in records:
        versions.setdefault(r["repo"], set()).add(r["version"])
    fig: dict[str, dict] = {}
    for line in lines:
        repo = repo_of.get(line["instance_id"])
        if repo is None:
            continue
        if repo not in fig:
            built = {v for v in versions[repo] if f"{repo}@{v}" in envs}
            build_s = sum(json.loads(m.read_text()).get("build_s", 0) for v in built
                          if (m := Path(envs[f"{repo}@{v}"].dir) / "manifest.json").is_file())
            fig[repo] = {"instances": 0, "versions": len(versions[repo]), "envs_built": len(built),
                         "gold_resolved": 0, "empty_resolved": 0, "wrong_resolved": 0, "env_errors": 0,
                         "skipped": {}, "not_resolved": {}, "empty_resolved_ids": [], "wrong_resolved_ids": [],
                         "wrong_blocks_unneeded": {}, "build_s": round(build_s), "gold_s": []}
        f, kind, ok = fig[repo], line["kind"], line["status"] == "passed"
        if kind == "skipped":
            f["skipped"][line["instance_id"]] = line["message"]
            continue
        f[f"{kind}_resolved"] += ok
        f["env_errors"] += line["status"] == "env_error"
        if kind == "wrong" and line.get("tried_resolved"):
            f["wrong_blocks_unneeded"][line["instance_id"]] = f"{line['tried_resolved']} of {line['blocks']}"
        if kind == "gold":
            f["instances"] += 1
            f["gold_s"].append(line["seconds"])
            if not ok:
                f["not_resolved"][line["instance_id"]] = f"{line['status']}: {line['message']}"[:300]
        elif ok:
            f[f"{kind}_resolved_ids"].append(line["instance_id"])
    for f in fig.values():
        g = sorted(f.pop("gold_s"))
        f["median_gold_s"] = round(g[len(g) // 2], 1) if g else None
    total = {k: sum(f[k] for f in fig.values()) for k in ("instances", "gold_resolved", "empty_resolved",
                                                            "wrong_resolved", "env_errors")}
    return {**total, "skipped": sum(len(f["skipped"]) for f in fig.values()), "repos": fig}


def judge_wrong(judge, task, patch: str, tries: int) -> tuple[str, float, str, dict]:
    """The first of `wrong_variants` that does not resolve (status, seconds, message, details): how many blocks
    the gold has, how many variants were judged, and how many of them still resolved (a block the tests do not
    need); when every one resolves, the last one's verdict, "passed"."""
    blocks, variants = len(change_blocks(patch)), wrong_variants(patch, tries, _read_commit(task))
    t0, resolved = time.monotonic(), 0
    for n, variant in enumerate(variants, 1):
        v = judge.judge(task, variant)
        if not v.passed:
            break
        resolved += 1
    message = v.message if not v.passed else (f"the gold still resolves without each of its {n} largest change "
                                              f"blocks (of {blocks})")
    return v.status, time.monotonic() - t0, message, {"blocks": blocks, "tried": n, "tried_resolved": resolved}


class Skipped(Exception):
    """An instance that cannot be judged here (`skip_reason`): listed as skipped, not judged."""


def run_all(records: list[dict], envs_dir: str, mirrors: str, per_repo: int, out: str | None,
            log_dir: str | None, start: int = 0, kinds: tuple = ("gold", "empty", "wrong"), ids: set | None = None,
            wrong_tries: int = 3, test_timeout_s: float = 0) -> dict:
    envs = load_envs(envs_dir)
    by_repo: dict[str, list[dict]] = {}
    for r in records:
        by_repo.setdefault(r["repo"], []).append(r)
    lines = []
    sink = open(out, "a", encoding="utf-8") if out else None
    with RepoJudge(envs=envs, log_dir=log_dir) as judge:
        for repo, recs in sorted(by_repo.items()):
            todo = [r for r in recs if f"{repo}@{r['version']}" in envs and (not ids or r["instance_id"] in ids)]
            todo = todo[start:][:per_repo or None]
            for r in todo:
                try:
                    if why := skip_reason(r, envs):  # tests that need the internet, ids no run names: not judged
                        raise Skipped(why)
                    task = from_swebench(r, r["instance_id"], mirrors)
                    if test_timeout_s:
                        task.limits.test_timeout_s = test_timeout_s
                except Skipped as e:
                    judged = [("skipped", "skipped", 0.0, str(e)[:300], {})]
                except Exception as e:  # noqa: BLE001 - a record that cannot load is reported, the run goes on
                    judged = [("gold", "error", 0.0, f"cannot load: {e}"[:300], {})]
                else:
                    judged = []
                    for kind in kinds:
                        if kind == "wrong":
                            status, dt, message, more = judge_wrong(judge, task, r["patch"], wrong_tries)
                            judged.append((kind, status, dt, message[:300], more))
                            continue
                        t0 = time.monotonic()
                        v = judge.judge(task, r["patch"] if kind == "gold" else "")
                        judged.append((kind, v.status, time.monotonic() - t0, v.message[:300], {}))
                for kind, status, dt, message, more in judged:
                    line = {"instance_id": r["instance_id"], "kind": kind, "status": status, "seconds": round(dt, 1),
                            "message": message, **more}
                    lines.append(line)
                    print(json.dumps(line), file=sys.stderr)
                    if sink:
                        sink.write(json.dumps(line) + "\n")
                        sink.flush()
    if sink:
        sink.close()
    return summarize(lines, records, envs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", default=str(DATA / "swe-bench-lite-test.json"))
    ap.add_argument("--static", action="store_true", help="the rules pass over every record (no environment)")
    ap.add_argument("--trees", default=str(DATA / "swebench"), help="INSTANCE_ID.tar.gz trees")
    ap.add_argument("--envs", help="directory of built environments (codechat repo env build)")
    ap.add_argument("--log-dir", help="per-instance logs (patch, test output, report)")
    ap.add_argument("--warm", action="store_true", help="fork every test run from a warm runner (as training does)")
    ap.add_argument("--all", action="store_true", help="every repository with an environment built from the specs")
    ap.add_argument("--mirrors", default="/work/.mirror", help="--all: git mirrors of the repositories")
    ap.add_argument("--per-repo", type=int, default=0, help="--all: at most N instances per repository (0: all)")
    ap.add_argument("--start", type=int, default=0, help="--all: skip the first N instances of each repository")
    ap.add_argument("--repos", default="", help="--all: only repositories whose name contains this text")
    ap.add_argument("--out", help="--all: append one JSON line per judgement to this file")
    ap.add_argument("--kinds", default="gold,empty,wrong", help="--all: which changes to judge (comma-separated)")
    ap.add_argument("--ids", default="", help="--all: only these instance ids (comma-separated)")
    ap.add_argument("--wrong-tries", type=int, default=3, help="--all: wrong changes judged per instance, one "
                    "change block undone each, largest first, until one does not resolve")
    ap.add_argument("--test-timeout", type=float, default=0, help="--all: seconds a test run may take (default: "
                    "the record's limit, 600; more on a loaded machine)")
    ap.add_argument("--summarize", nargs="+", metavar="RESULTS", help="the figures of judgement lines written by "
                    "--out (a stopped or split run; a later line of an instance and kind replaces an earlier one); --envs for "
                    "environments and build seconds")
    args = ap.parse_args()
    records = json.loads(Path(args.records).read_text())
    if args.static:
        print(json.dumps(run_static(records)))
        return
    if args.summarize:
        lines = [json.loads(l) for p in args.summarize for l in Path(p).read_text().splitlines() if l.strip()]
        print(json.dumps(summarize(lines, records, load_envs(args.envs) if args.envs else {})))
        return
    if args.all:
        if not args.envs:
            sys.exit("swebench_gold.py: --all needs --envs DIR (built by `codechat repo env build RECORDS --mirrors "
                     "DIR --out ENVS`)")
        recs = [r for r in records if args.repos in r["repo"]]
        kinds = tuple(k for k in args.kinds.split(",") if k)
        if not kinds or set(kinds) - {"gold", "empty", "wrong"}:
            sys.exit(f"swebench_gold.py: --kinds {args.kinds!r}: a comma-separated subset of gold,empty,wrong")
        ids = {i for i in args.ids.split(",") if i}
        print(json.dumps(run_all(recs, args.envs, args.mirrors, args.per_repo, args.out, args.log_dir, args.start,
                                 kinds, ids, args.wrong_tries, args.test_timeout)))
        return
    if not args.envs:
        sys.exit("swebench_gold.py: give --envs DIR (built by `codechat repo env build bench/swebench_envs.json "
                 "--out DIR`) or --static")
    print(json.dumps(run_live(records, Path(args.trees), args.envs, args.log_dir, args.warm)))


if __name__ == "__main__":
    main()
