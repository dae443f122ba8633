"""Source code a repository's build downloads, given locally (`codechat repo env build --sources DIR`).

matplotlib's build downloads freetype (2.6.1, the version its baseline images are rendered with, named in its
`setupext.py`) and links it statically; the build has no internet. With `--sources DIR` holding that freetype
(a git mirror of freetype/freetype with the release's tag, in the mirror layouts `--mirrors` takes, or an
extracted tree `freetype-2.6.1/`), the build puts it where the repository's own build looks before downloading
(`build/freetype-2.6.1` in the tree) and the repository's build makes it, with its own flags (matplotlib's
`setupext.py`: `./configure --enable-static --disable-shared ...` and `make`). A git tree lacks the configure
script a release holds: the build generates it first with the tree's own `autogen.sh` (needs autoconf, automake
and libtool), as matplotlib's newer `setupext.py` would itself, so older ones (3.5's early bases run `configure`
without it) build it too. The tree is written once into the environment
(`sources/freetype-2.6.1`) and linked from each checkout an install runs in, so freetype is built once and
every later install reuses it, as a matplotlib checkout reuses its `build/`. Without the source, or with a
source of another version, the build uses the system's library (`SYSTEM_LIBRARIES`) and says why in its log and
in manifest.json; `check` prints the version the built extension links, recorded as `linked`.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from codechat.tasks.submodules import find_git, mirror_candidates
from codechat.verifier.swebench_spec import git_show


@dataclass(frozen=True)
class BuildSource:
    """A library a repository's build downloads, and where the build looks for it first."""
    name: str
    """The library ("freetype"): the name of an extracted tree `<name>-<version>/` under the sources directory."""
    repo: str
    """owner/name of the library's git repository: its mirror under the sources directory."""
    version_file: str
    """The repository's file naming the version its build downloads."""
    version_re: str
    """A regular expression whose first group is that version in `version_file`."""
    tag: str
    """The git tag of a version, `{v}` the version with dots, `{dashed}` with dashes."""
    dest: str
    """Where in the tree the build looks for the extracted source before downloading (`{v}`: the version)."""
    version_header: str
    """A file of the source tree holding its version, read to check a given tree."""
    version_macros: tuple[str, ...]
    """The macros in `version_header` whose values, joined by dots, are the version."""
    needs_generated: str
    """A file a release has and a git tree lacks: without it, the build generates it (autotools)."""
    generator: str
    """The command (in the tree) generating `needs_generated`."""
    generator_tools: tuple[str, ...]
    """The programs `generator` needs."""
    check: str
    """Python code printing the version the built extension links (run with the environment's python)."""


FREETYPE = BuildSource(
    name="freetype", repo="freetype/freetype", version_file="setupext.py",
    version_re=r"(?m)^(?:TESTING_VERSION_OF_FREETYPE|LOCAL_FREETYPE_VERSION)\s*=\s*['\"]([\d.]+)['\"]",
    tag="VER-{dashed}", dest="build/freetype-{v}", version_header="include/freetype/freetype.h",
    version_macros=("FREETYPE_MAJOR", "FREETYPE_MINOR", "FREETYPE_PATCH"),
    needs_generated="builds/unix/configure", generator="sh ./autogen.sh",
    generator_tools=("autoconf", "automake", "libtoolize"),
    check="import matplotlib.ft2font as f; print(f.__freetype_version__)")

BUILD_SOURCES = {"matplotlib/matplotlib": (FREETYPE,)}
"""The libraries each repository's build downloads that `--sources` can give it."""


def wanted_version(source: BuildSource, mirror: Path, commit: str) -> str | None:
    """The version of `source` the repository's build at `commit` downloads, or None when its file names none."""
    text = git_show(mirror, commit, source.version_file)
    m = re.search(source.version_re, text or "")
    return m[1] if m else None


def tree_version(source: BuildSource, tree: Path) -> str | None:
    """The version an extracted source tree says it is (its `version_header`), or None."""
    try:
        text = (tree / source.version_header).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    parts = [re.search(rf"#\s*define\s+{m}\s+(\d+)", text) for m in source.version_macros]
    return ".".join(p[1] for p in parts) if all(parts) else None


def prepare_source(source: BuildSource, version: str, sources: Path, out: Path) -> tuple[Path | None, dict]:
    """`source` at `version` written to out/<name>-<version> from the sources directory: an extracted tree
    `<name>-<version>/` (its version checked) or the library's git mirror at the version's tag. Returns the tree
    (None when there is none to use) and what the manifest records: where it came from, or why it is not used."""
    v = version
    dest = out / f"{source.name}-{v}"
    tree = sources / f"{source.name}-{v}"
    looked = [str(tree)]
    if tree.is_dir():
        found = tree_version(source, tree)
        if found != v:
            return None, {"version": v, "error": f"{tree} is {source.name} {found or 'of no known version'} "
                                                 f"({source.version_header}), not {v}"}
        shutil.copytree(tree, dest, symlinks=True)
        return _generated(source, dest, {"version": v, "from": str(tree)})
    mirror = find_git(sources, source.repo)
    looked += [str(c) for c in mirror_candidates(sources, source.repo)]
    if mirror is None:
        return None, {"version": v, "error": f"no {source.name} {v} under {sources} (looked for {', '.join(looked)})"}
    tag = source.tag.format(v=v, dashed=v.replace(".", "-"))
    res = subprocess.run(["git", "-C", str(mirror), "rev-parse", "--verify", "-q", f"refs/tags/{tag}^{{commit}}"],
                         capture_output=True, text=True)
    if res.returncode:
        return None, {"version": v, "error": f"the {source.name} mirror {mirror} has no tag {tag} ({source.name} {v})"}
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(mirror), "archive", "--format=tar", tag], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True, text=True)
    archive.stdout.close()
    if archive.wait() or untar.returncode:
        shutil.rmtree(dest)
        return None, {"version": v, "error": f"git archive {tag} of {mirror} failed: {untar.stderr.strip()[-200:]}"}
    return _generated(source, dest, {"version": v, "from": str(mirror), "tag": tag, "commit": res.stdout.strip()})


def _generated(source: BuildSource, tree: Path, note: dict) -> tuple[Path | None, dict]:
    """The tree with its generated build files (a git tree's, made by `generator`), or None where it lacks them
    and they cannot be made (a program missing, the generator failing)."""
    if (tree / source.needs_generated).exists():
        return tree, note
    lacking = [t for t in source.generator_tools if shutil.which(t) is None]
    why = (f"generating it needs {', '.join(lacking)} (apt-get install autoconf automake libtool)" if lacking else "")
    if not why:
        try:
            res = subprocess.run(["bash", "-c", source.generator], cwd=tree, capture_output=True, text=True,
                                 timeout=600)
            out = (res.stdout + res.stderr).strip().splitlines()
        except subprocess.TimeoutExpired:
            res, out = None, ["timed out"]
        if res is None or res.returncode or not (tree / source.needs_generated).exists():
            why = f"`{source.generator}` did not make it: {(out or [''])[-1][:200]}"
    if why:
        shutil.rmtree(tree)
        return None, {**note, "error": f"{source.name} {note['version']} from {note['from']} has no "
                                       f"{source.needs_generated}; {why}"}
    return tree, {**note, "generated": f"{source.needs_generated} ({source.generator})"}


def link_sources(src: Path, prepared: dict[str, tuple[BuildSource, Path]]) -> None:
    """Link each prepared tree where the checkout's build looks for it (`dest`), before an install there."""
    for source, tree in prepared.values():
        version = tree.name.removeprefix(f"{source.name}-")
        link = src / source.dest.format(v=version)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            continue  # the checkout holds one already (a build directory the tree tracks)
        link.symlink_to(tree, target_is_directory=True)


def prepare_sources(repo: str, mirror: Path, commit: str, sources: Path | None, out: Path,
                    log=print) -> tuple[dict[str, tuple[BuildSource, Path]], dict[str, dict]]:
    """The sources of BUILD_SOURCES[repo] at the versions the build at `commit` downloads, written under
    out/sources from `sources` (None: not given). Returns {name: (source, tree)} for those given and the
    manifest's notes for all, logging each one's use or the reason the system's library is used instead."""
    prepared, notes = {}, {}
    for s in BUILD_SOURCES.get(repo, ()):
        v = wanted_version(s, mirror, commit)
        if v is None:
            continue
        if sources is None:
            notes[s.name] = {"version": v, "error": f"the build downloads {s.name} {v}; no --sources DIR gives it"}
        else:
            (out / "sources").mkdir(parents=True, exist_ok=True)
            tree, notes[s.name] = prepare_source(s, v, sources, out / "sources")
            if tree is not None:
                prepared[s.name] = (s, tree)
        if s.name in prepared:
            log(f"{repo}: {s.name} {v} from {notes[s.name]['from']}, built by the repository's build")
        else:
            log(f"{repo}: {notes[s.name]['error']}: built with the system's {s.name}")
    return prepared, notes


def linked_version(source: BuildSource, venv: Path) -> str:
    """The version of `source` the environment's built extension links (`check`), or what its check printed."""
    res = subprocess.run([str(venv / "bin" / "python"), "-c", source.check], cwd=venv, capture_output=True,
                         text=True, timeout=120)
    out = (res.stdout.strip() if res.returncode == 0 else res.stderr.strip()).splitlines()
    return out[-1][:200] if out else ""
