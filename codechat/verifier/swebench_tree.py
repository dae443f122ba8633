"""What a commit's tree holds, for building SWE-bench environments (`swebench_env.py`): which base commits an
install must run at again (their packaging files or compiled sources differ), the files an install created or
changed (the overlay the judge lays over each fresh tree), and the files whose contents a mirror lacks."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

SKIP_DIRS = {".git", "__pycache__", ".eggs", "build", ".tox", ".pytest_cache"}
OVERLAY_MAX_BYTES = 64 << 20


def copy_overlay(src: Path, dst: Path) -> list[str]:
    """Copy the files install created or changed in the checkout (untracked, ignored or modified) to dst."""
    res = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--ignored", "-uall", "-z"],
                         capture_output=True, text=True, check=True)
    paths = []
    for entry in res.stdout.split("\0"):
        if len(entry) < 4 or entry[:2] == " D":
            continue
        p = entry[3:]
        parts = p.split("/")
        if set(parts) & SKIP_DIRS or any(x.endswith(".egg-info") for x in parts) or p.endswith((".pyc", ".pyo")):
            continue
        f = src / p
        if f.is_file() and not f.is_symlink() and f.stat().st_size <= OVERLAY_MAX_BYTES:
            (dst / p).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst / p)
            paths.append(p)
    return sorted(paths)


PACKAGING = ("setup.py", "setup.cfg", "pyproject.toml")


COMPILED = re.compile(r"\.(?:pyx|pxd|pxi|c|cc|cpp|cxx|h|hpp|f|f90)$")
"""Sources an install compiles: a base whose own differ needs its own build (scikit-learn 0.22's bases rename
`expected_mutual_info_fast` and change libsvm under the same packaging files)."""


def packaging_key(src: Path, commit: str) -> str:
    """The blob ids of `commit`'s packaging files and compiled sources (what an install at that commit reads and
    builds)."""
    tree = subprocess.run(["git", "-C", str(src), "ls-tree", "-r", commit], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    return "\n".join(line for line in tree if line.split("\t", 1)[-1] in PACKAGING or
                     COMPILED.search(line.split("\t", 1)[-1]))


def changed_packaging(src: Path, commit: str, bases: set[str]) -> dict[str, list[str]]:
    """The base commits whose packaging files differ from `commit`'s, grouped by those files' contents: {the
    group's first commit: the group's commits} (sorted). An install at one commit of a group stands for all."""
    own, groups = packaging_key(src, commit), {}
    for b in sorted(bases - {commit}):
        if (key := packaging_key(src, b)) != own:
            groups.setdefault(key, []).append(b)
    return {g[0]: g for g in groups.values()}


def without_absent(src: Path, commit: str) -> list[str]:
    """The files of `commit` whose contents the mirror lacks (a snapshot may leave its largest files out), left
    out of the clone's checkouts (sparse patterns) so the environment can be built without them; [] when none.
    The trees judged are read whole (`git archive`): an instance whose base lacks a file is not judged."""
    tree = subprocess.run(["git", "-C", str(src), "ls-tree", "-r", "-z", commit], capture_output=True, text=True)
    entries = [e.split("\t", 1) for e in tree.stdout.split("\0") if "\t" in e]
    blobs = [(meta.split()[2], path) for meta, path in entries if meta.split()[1] == "blob"]
    check = subprocess.run(["git", "-C", str(src), "cat-file", "--batch-check"], capture_output=True, text=True,
                           input="".join(h + "\n" for h, _ in blobs))
    absent = {line.split()[0] for line in check.stdout.splitlines() if line.endswith(" missing")}
    paths = sorted(p for h, p in blobs if h in absent)
    if paths:
        subprocess.run(["git", "-C", str(src), "sparse-checkout", "set", "--no-cone", "/*",
                        *("!/" + re.sub(r"([*?\[\\!#])", r"\\\1", p) for p in paths)], capture_output=True, check=True)
    return paths
