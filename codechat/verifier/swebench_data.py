"""Data files a repository's tests download at test time, taken from git mirrors at build time.

pydicom's tests read most of their DICOM files through `get_testdata_file`, which downloads each from
`github.com/pydicom/pydicom-data/raw/<commit>/<path>` (the table `pydicom/data/urls.json`) into
`~/.pydicom/data`. The harness's containers had a network; the sandbox has none, and pydicom 2.1+ retries each
download three times with 3, 6 and 12 s pauses: a test module that reads 22 such files at import (2.2's
`test_numpy_pixel_data.py`) printed nothing for 8 minutes, and then its tests failed. The build takes those files
from a mirror of the data repository under the mirrors directory (found as repositories are: `find_git`) at the
commits the table names, checks each against the tree's SHA-256 table (`pydicom/data/hashes.json`), and writes them
under the environment's `home/`; the suite runner links them into each test run's home directory, where the
download would have put them (`suite_runner.link_home`). A file the mirror lacks (its snapshot leaves out files
over about 3.5 MB) or whose hash differs is left out and listed in the manifest: its tests still try the network.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

from codechat.tasks.submodules import find_git

TEST_DATA = {"pydicom/pydicom": ("pydicom/data/urls.json", "pydicom/data/hashes.json", ".pydicom/data")}
"""repo -> (its table of file name -> download URL, its table of file name -> SHA-256, the directory under the
home directory the downloads go to)."""
RAW_URL = re.compile(r"https://github\.com/([\w.-]+/[\w.-]+)/raw/([0-9a-f]{40})/([\w./-]+)")
HOME = "home"
"""The environment's directory holding the files (the home directory's layout)."""


def _show(git: Path, commit: str, path: str) -> bytes | None:
    res = subprocess.run(["git", "-C", str(git), "show", f"{commit}:{path}"], capture_output=True)
    return res.stdout if res.returncode == 0 else None


def _table(mirror: Path, commit: str, path: str) -> dict[str, str]:
    raw = _show(mirror, commit, path)
    try:
        data = json.loads(raw) if raw is not None else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def fill_test_data(repo: str, mirror: Path, commits: list[str], mirrors: Path, env_dir: Path, log=print) -> dict:
    """Write the files the tests of `repo` download (at each of `commits`: the environment commit first, then the
    base commits) under env_dir/home. Returns the manifest's record: {"home", "files", "absent", "hash_differs",
    "no_mirror"} (empty when the repository downloads nothing)."""
    if repo not in TEST_DATA:
        return {}
    urls_path, hashes_path, sub = TEST_DATA[repo]
    wanted: dict[str, tuple[str, str]] = {}  # name -> (url, sha256); the first commit's entry of a name is kept
    for c in commits:
        hashes = _table(mirror, c, hashes_path)
        for name, url in _table(mirror, c, urls_path).items():
            wanted.setdefault(name, (url, hashes.get(name, "")))
    out: dict = {"home": HOME, "files": 0, "absent": [], "hash_differs": [], "no_mirror": []}
    dest = env_dir / HOME / sub
    for name, (url, digest) in sorted(wanted.items()):
        m = RAW_URL.fullmatch(url)
        git = find_git(mirrors, m[1]) if m else None
        if git is None:
            if m and m[1] not in out["no_mirror"]:
                out["no_mirror"].append(m[1])
            out["absent"].append(name)
            continue
        data = _show(git, m[2], m[3])
        if data is None:
            out["absent"].append(name)
        elif digest and hashlib.sha256(data).hexdigest() != digest:
            out["hash_differs"].append(name)
        elif "/" not in name and name not in ("", ".", ".."):
            dest.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)
            out["files"] += 1
    log(f"{out['files']} of {len(wanted)} test data files its tests download, from mirrors"
        + (f"; no mirror of {', '.join(out['no_mirror'])}" if out["no_mirror"] else "")
        + (f"; left out: {', '.join((out['absent'] + out['hash_differs'])[:8])}"
           if out["absent"] or out["hash_differs"] else ""))
    return out
