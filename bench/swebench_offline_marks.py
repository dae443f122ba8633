"""The tests of a SWE-bench record set that need the internet, found from gold judgements in the sandbox (which has
no network), as an `--offline-skip` file for `codechat repo env build RECORDS`.

    python bench/swebench_gold.py --all --kinds gold --envs ENVS --mirrors MIRRORS --repos psf/requests \\
        --out gold.jsonl --log-dir LOGS          # environments built without marks (or with some to check)
    python bench/swebench_offline_marks.py LOGS [--records RECORDS] [--merge MARKS.json] > marks.json

A test is marked when, in a gold judgement (the log whose patch is the record's gold), it is one of the record's
FAIL_TO_PASS or PASS_TO_PASS tests that failed and its failure section in pytest's output shows a network error
(`NETWORK`: a name that does not resolve, an unreachable network): evidence from a run, not a guess from the test's
text (a test that only builds an httpbin.org URL runs offline). The reason names the error. `--merge`: marks
already given (an environment spec) are kept beside the new ones. Pytest-run repositories only (their failure
sections name each test). Prints the marks as a JSON list of {repo, version, offline_skip}, and on stderr per
repo@version how many tests were marked and how many failed for other reasons.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

DATA = Path(os.environ.get("CODECHAT_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data") / "repo"
NETWORK = re.compile(r"socket\.gaierror[^\n]*|Name or service not known|Temporary failure in name resolution|"
                     r"No address associated with hostname|Network is unreachable|NameResolutionError")
"""What a test's failure shows when it needed a host the sandbox cannot reach."""
SECTION = re.compile(r"^_+ (?:ERROR at (?:setup|teardown) of )?(.+?) _+$", re.M)
"""A failure section's headline (a long name leaves two `_` or fewer on a side)."""


def sections(output: str) -> dict[str, str]:
    """pytest's failure and error sections by headline (`Class.test_x[param]`, `test_y`)."""
    parts = SECTION.split(output)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = out.get(name, "") + body
    return out


def headline(test_id: str) -> str:
    """The headline pytest gives node id `path::Class::test[param]` in its failure sections: `Class.test[param]`."""
    return ".".join(test_id.split("::")[1:])


def gold_reports(log_dir: Path, records: dict[str, dict]):
    """(record, report, test output) of each gold judgement under `log_dir` (LOG/<instance>/<n>/)."""
    for task in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        rec = records.get(task.name)
        if rec is None:
            continue
        for n in sorted(p for p in task.iterdir() if (p / "report.json").is_file() and (p / "patch.diff").is_file()):
            if (n / "patch.diff").read_text(encoding="utf-8") == rec["patch"]:
                yield (rec, json.loads((n / "report.json").read_text(encoding="utf-8")),
                       (n / "test_output.txt").read_text(encoding="utf-8", errors="replace"))


def find_marks(log_dir: Path, records: list[dict]) -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    """({repo@version: {test id: reason}}, {repo@version: record tests that failed for another reason})."""
    marks: dict[str, dict[str, str]] = {}
    other: dict[str, int] = {}
    for rec, report, output in gold_reports(log_dir, {r["instance_id"]: r for r in records}):
        key = f"{rec['repo']}@{rec['version']}"
        failed = [t for part in ("fail_to_pass", "pass_to_pass") for k in ("failed", "unknown")
                  for t in (report.get(part) or {}).get(k, [])]
        found = sections(output)
        for test in failed:
            m = NETWORK.search(found.get(headline(test), ""))
            if m:
                why = f"needs the internet ({m[0].strip()[:80]}; the sandbox has no network)"
                marks.setdefault(key, {})[test] = why
            else:
                other[key] = other.get(key, 0) + 1
    return marks, other


def merged(marks: dict[str, dict[str, str]], path: str | None) -> list[dict]:
    """The marks as a JSON list, those of `path` (an environment spec or marks file) kept beside them."""
    out: dict[str, dict[str, str]] = {}
    if path:
        for e in json.loads(Path(path).read_text(encoding="utf-8")):
            if e.get("offline_skip"):
                out.setdefault(f"{e['repo']}@{e['version']}", {}).update(e["offline_skip"])
    for key, m in marks.items():
        out.setdefault(key, {}).update({t: why for t, why in m.items() if t not in out[key]})
    return [{"repo": k.split("@")[0], "version": k.split("@", 1)[1], "offline_skip": dict(sorted(v.items()))}
            for k, v in sorted(out.items())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log_dir", help="--log-dir of a `swebench_gold.py --all` run (its gold judgements are read)")
    ap.add_argument("--records", default=str(DATA / "swe-bench-lite-test.json"))
    ap.add_argument("--merge", help="marks to keep beside the new ones (an environment spec or marks file)")
    args = ap.parse_args()
    if not Path(args.log_dir).is_dir():
        sys.exit(f"swebench_offline_marks.py: {args.log_dir}: no such log directory")
    marks, other = find_marks(Path(args.log_dir), json.loads(Path(args.records).read_text(encoding="utf-8")))
    for key in sorted(set(marks) | set(other)):
        print(f"{key}: {len(marks.get(key, {}))} tests need the internet; {other.get(key, 0)} failed otherwise",
              file=sys.stderr)
    print(json.dumps(merged(marks, args.merge), indent=1))


if __name__ == "__main__":
    main()
