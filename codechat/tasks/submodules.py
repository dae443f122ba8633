"""A commit's git submodules filled from local mirrors, as `git submodule update --init` fills them from the network.

    fill_submodules(mirror_of_astropy, base_commit, tree, mirrors="/work/.mirror", repo="astropy/astropy")

`git archive` and a plain checkout leave a submodule's directory empty (astropy 1.3 holds `astropy_helpers` so,
and its `setup.py` cannot run without it). For each gitlink of the commit's tree (a path and the submodule's
commit), the URL that `.gitmodules` at that commit gives the path is read as `owner/name` (its last two path
parts; a relative URL such as `../helpers.git` against the superproject's own `repo`), the mirror of that name is
found under `mirrors` the way repositories are (owner__name, owner+name/repo, owner+name, owner/name, name), and
the submodule's commit is exported from it into the path; its own submodules are filled the same way (up to
MAX_DEPTH levels). Nothing is downloaded.
Protects against: a `.gitmodules` URL or a gitlink path that would leave the mirrors directory or the tree (`..`,
absolute paths, a `.git` component, a path through a symbolic link). Does not check that a mirror is the
repository the URL names upstream: the mirrors directory is the user's, trusted as the superproject's mirror is.
"""
from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
from pathlib import Path

from codechat import CodechatError

MAX_DEPTH = 3
"""Submodules inside submodules are filled this many levels deep at most."""
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class SubmoduleError(CodechatError):
    """A submodule cannot be filled: no URL for it, no mirror of that URL, or the mirror lacks its commit."""


def find_git(root: Path, repo: str) -> Path | None:
    """The git directory (bare or a checkout) of `owner/name` under `root`, or None."""
    for c in mirror_candidates(root, repo):
        if (c / ".git").exists() or ((c / "HEAD").is_file() and (c / "objects").is_dir()):
            return c
    return None


def mirror_candidates(root: Path, repo: str) -> list[Path]:
    return [root / repo.replace("/", "__"), root / repo.replace("/", "+") / "repo", root / repo.replace("/", "+"),
            root / repo, root / repo.rsplit("/", 1)[-1]]


def url_repo(url: str, parent: str | None = None) -> str | None:
    """`owner/name` of a submodule URL (https, ssh, scp-like `git@host:owner/name.git`, a path; `./` and `../`
    resolved against `parent`), or None when it does not name one."""
    url = url.strip()
    if url.startswith(("./", "../")):
        if not parent:
            return None
        path = posixpath.normpath(posixpath.join(parent, url))
        if path.startswith(".."):  # above the host's root
            return None
    else:
        path = re.sub(r"^[a-z][a-z0-9+.-]*://[^/]*", "", url)  # scheme and host
        path = re.sub(r"^[^/:]+@[^/:]+:", "", path)  # scp-like user@host:
    parts = [p for p in path.rstrip("/").removesuffix(".git").split("/") if p]
    if len(parts) < 2 or not all(NAME.fullmatch(p) and p not in (".", "..") for p in parts[-2:]):
        return None
    return f"{parts[-2]}/{parts[-1]}"


def gitlinks(git_dir: Path, commit: str) -> list[tuple[str, str]]:
    """(path, submodule commit) of each gitlink in `commit`'s tree."""
    res = subprocess.run(["git", "-C", str(git_dir), "ls-tree", "-r", "-z", commit], capture_output=True, text=True)
    out = []
    for entry in res.stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        if meta.startswith("160000 commit "):
            out.append((path, meta.split()[2]))
    return out


def submodule_urls(git_dir: Path, commit: str) -> dict[str, str]:
    """{path: url} of `.gitmodules` at `commit` ({} when it has none)."""
    res = subprocess.run(["git", "-C", str(git_dir), "config", "--blob", f"{commit}:.gitmodules", "-z", "--list"],
                         capture_output=True, text=True)
    keys: dict[str, dict[str, str]] = {}
    for item in res.stdout.split("\0"):
        key, _, value = item.partition("\n")
        m = re.fullmatch(r"submodule\.(.+)\.(path|url)", key)
        if m:
            keys.setdefault(m[1], {})[m[2]] = value
    return {k["path"].strip("/"): k["url"] for k in keys.values() if "path" in k and "url" in k}


def _safe_dir(tree: Path, path: str) -> Path:
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..", ".git") for p in parts):
        raise SubmoduleError(f"submodule path {path!r}: not a plain relative path")
    d = tree.joinpath(*parts)
    for i in range(1, len(parts) + 1):  # nothing on the way may be a link out of the tree
        if tree.joinpath(*parts[:i]).is_symlink():
            raise SubmoduleError(f"submodule path {path!r}: passes through a symbolic link")
    return d


def fill_submodules(git_dir: Path, commit: str, tree: Path, mirrors: Path, repo: str | None = None,
                    depth: int = 0) -> list[str]:
    """Export each submodule of `commit` (read from `git_dir`) into its directory under `tree`, replacing what
    the directory held; returns the paths filled (nested ones as `outer/inner`). Raises SubmoduleError naming
    the submodule when its URL, its mirror or its commit is missing."""
    links = gitlinks(git_dir, commit)
    if not links:
        return []
    if depth >= MAX_DEPTH:
        raise SubmoduleError(f"submodules nested more than {MAX_DEPTH} levels deep at {commit[:12]}")
    urls, filled = submodule_urls(git_dir, commit), []
    for path, sub_commit in links:
        where = f"submodule {path} at {sub_commit[:12]}"
        d = _safe_dir(tree, path)
        if path not in urls:
            raise SubmoduleError(f"{where}: .gitmodules at {commit[:12]} gives no URL for it")
        name = url_repo(urls[path], repo)
        if name is None:
            raise SubmoduleError(f"{where}: URL {urls[path]!r} names no owner/name to find a mirror by")
        mirror = find_git(Path(mirrors), name)
        if mirror is None:
            looked = ", ".join(str(c.relative_to(mirrors)) for c in mirror_candidates(Path(mirrors), name))
            raise SubmoduleError(f"{where}: no git mirror of {name} ({urls[path]}) under {mirrors} "
                                 f"(looked for {looked})")
        tar = subprocess.run(["git", "-C", str(mirror), "archive", "--format=tar", sub_commit], capture_output=True)
        if tar.returncode:
            raise SubmoduleError(f"{where}: the mirror {mirror} cannot export it: "
                                 f"{tar.stderr.decode(errors='replace').strip()[-200:]}")
        if d.is_dir():
            shutil.rmtree(d)
        elif d.exists():
            d.unlink()
        d.mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(d)], input=tar.stdout, check=True)
        filled.append(path)
        filled += [f"{path}/{p}" for p in fill_submodules(mirror, sub_commit, d, mirrors, name, depth + 1)]
    return filled
