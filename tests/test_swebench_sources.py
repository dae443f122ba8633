"""Library sources a repository's build downloads, given locally (`repo env build --sources DIR`): matplotlib's
freetype at the version its setupext.py names, from a freetype git mirror's tag or an extracted tree, put where
the build looks before downloading; a missing or other version says why and leaves the system's library."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codechat.cli import main
from codechat.tasks.submodules import find_git
from codechat.verifier import swebench_sources
from codechat.verifier.swebench_sources import FREETYPE, link_sources, prepare_sources, wanted_version
from codechat.verifier.swebench_spec import build_environ

MIRRORS = Path(os.environ.get("CODECHAT_MIRRORS", "/work/.mirror"))
SETUPEXT = ("TESTING_VERSION_OF_FREETYPE = '2.6.1'\nif sys.platform == 'win32':\n"
            "    LOCAL_FREETYPE_VERSION = '2.11.1'\nelse:\n    LOCAL_FREETYPE_VERSION = TESTING_VERSION_OF_FREETYPE\n")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str], tag: str | None = None) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    if tag:
        _git(repo, "tag", tag)
    return _git(repo, "rev-parse", "HEAD")


def _header(version: str) -> str:
    major, minor, patch = version.split(".")
    return (f"#define FREETYPE_MAJOR  {major}\n#define FREETYPE_MINOR  {minor}\n"
            f"#define FREETYPE_PATCH  {patch}\n")


@pytest.fixture
def layout(tmp_path):
    """A matplotlib-like mirror whose setupext.py names freetype 2.6.1, and a sources directory holding a
    freetype git mirror (owner+name/repo, the fetched layout) tagged VER-2-6-1 and VER-2-7-0."""
    mpl = tmp_path / "mpl"
    mpl.mkdir()
    _git(mpl, "init", "-q")
    commit = _commit(mpl, {"setupext.py": SETUPEXT})
    ft = tmp_path / "sources" / "freetype+freetype" / "repo"
    ft.mkdir(parents=True)
    _git(ft, "init", "-q")
    old = _commit(ft, {"include/freetype/freetype.h": _header("2.6.1"), "builds/unix/configure.raw": "",
                       "autogen.sh": "echo '#!/bin/sh' > builds/unix/configure\n"}, tag="VER-2-6-1")
    _commit(ft, {"include/freetype/freetype.h": _header("2.7.0")}, tag="VER-2-7-0")
    return mpl, commit, tmp_path / "sources", old


def test_the_freetype_setupext_names_is_taken_from_the_mirrors_tag_and_linked_where_the_build_looks(
        layout, tmp_path):
    mpl, commit, sources, old = layout
    assert wanted_version(FREETYPE, mpl, commit) == "2.6.1"  # not the Windows-on-ARM line's 2.11.1
    logged = []
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, commit, sources, tmp_path / "env", logged.append)
    tree = tmp_path / "env" / "sources" / "freetype-2.6.1"
    assert prepared == {"freetype": (FREETYPE, tree)}
    assert "FREETYPE_MINOR  6" in (tree / "include/freetype/freetype.h").read_text()
    assert notes["freetype"] == {"version": "2.6.1", "from": str(sources / "freetype+freetype" / "repo"),
                                 "tag": "VER-2-6-1", "commit": old,
                                 "generated": "builds/unix/configure (sh ./autogen.sh)"}
    assert (tree / "builds/unix/configure").is_file()  # generated as a release holds it
    assert "freetype 2.6.1 from" in logged[0]
    src = tmp_path / "checkout"
    src.mkdir()
    link_sources(src, prepared)
    assert (src / "build" / "freetype-2.6.1").resolve() == tree
    cfg = Path(build_environ("matplotlib/matplotlib", tmp_path, set(prepared))["MPLSETUPCFG"]).read_text()
    assert "system_freetype = False" in cfg and "system_qhull = True" in cfg  # qhull stays the system's


def test_an_extracted_tree_of_another_version_is_not_used_and_the_log_says_why(layout, tmp_path):
    mpl, commit, sources, _ = layout
    (sources / "freetype-2.6.1" / "include" / "freetype").mkdir(parents=True)
    (sources / "freetype-2.6.1" / "include" / "freetype" / "freetype.h").write_text(_header("2.12.1"))
    logged = []
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, commit, sources, tmp_path / "env", logged.append)
    assert prepared == {} and "is freetype 2.12.1" in notes["freetype"]["error"]
    assert logged[0].endswith("not 2.6.1: built with the system's freetype")
    cfg = Path(build_environ("matplotlib/matplotlib", tmp_path, set(prepared))["MPLSETUPCFG"]).read_text()
    assert "system_freetype = True" in cfg


def test_an_extracted_release_tree_is_copied_as_it_is(layout, tmp_path):
    mpl, commit, sources, _ = layout
    tree = sources / "freetype-2.6.1"
    for path, text in {"include/freetype/freetype.h": _header("2.6.1"), "builds/unix/configure": "#!/bin/sh\n"}.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, commit, sources, tmp_path / "env", print)
    assert notes["freetype"] == {"version": "2.6.1", "from": str(tree)}  # a release: nothing to generate
    assert (prepared["freetype"][1] / "builds/unix/configure").is_file()


def test_a_mirror_without_the_versions_tag_or_no_sources_leave_the_systems_freetype(layout, tmp_path):
    mpl, commit, sources, _ = layout
    _commit(mpl, {"setupext.py": SETUPEXT.replace("2.6.1", "2.6.2")})
    newer = _git(mpl, "rev-parse", "HEAD")
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, newer, sources, tmp_path / "a", print)
    assert prepared == {} and notes["freetype"]["error"].endswith("has no tag VER-2-6-2 (freetype 2.6.2)")
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, commit, None, tmp_path / "b", print)
    assert prepared == {} and "no --sources DIR gives it" in notes["freetype"]["error"]
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, commit, tmp_path / "empty", tmp_path / "c", print)
    assert prepared == {} and "no freetype 2.6.1 under" in notes["freetype"]["error"]
    assert prepare_sources("sympy/sympy", mpl, commit, sources, tmp_path / "d", print) == ({}, {})


def test_a_git_tree_whose_configure_cannot_be_generated_is_not_used(layout, tmp_path, monkeypatch):
    mpl, commit, sources, _ = layout
    monkeypatch.setattr(swebench_sources.shutil, "which", lambda name: None if name == "automake" else "/bin/x")
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, commit, sources, tmp_path / "env", print)
    assert prepared == {} and "generating it needs automake" in notes["freetype"]["error"]
    assert not (tmp_path / "env" / "sources" / "freetype-2.6.1").exists()
    monkeypatch.undo()
    _commit(sources / "freetype+freetype" / "repo", {"autogen.sh": "echo 'autoconf: no' >&2; exit 1\n"},
            tag="VER-2-6-2")
    _commit(mpl, {"setupext.py": SETUPEXT.replace("2.6.1", "2.6.2")})
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, _git(mpl, "rev-parse", "HEAD"), sources,
                                      tmp_path / "env2", print)
    assert prepared == {} and notes["freetype"]["error"].endswith("`sh ./autogen.sh` did not make it: autoconf: no")


def test_sources_that_are_not_a_directory_are_one_line(shared_data, tmp_path, capsys):
    assert main(["repo", "env", "build", str(shared_data / "repo" / "swe-bench-lite-test.json"), "--out",
                 str(tmp_path / "out"), "--mirrors", str(tmp_path), "--sources", str(tmp_path / "nope")]) == 2
    assert f"--sources {tmp_path / 'nope'}: no such directory" in capsys.readouterr().err


@pytest.mark.slow
def test_matplotlibs_own_setupext_builds_freetype_2_6_1_from_the_mirrors_tag_offline(shared_data, tmp_path):
    # the real files: matplotlib 3.7's setupext.py at its environment commit, freetype's history (a git mirror);
    # matplotlib's FreeType.do_custom_build finds the tree (its configure generated) in build/ and builds it
    mpl = find_git(MIRRORS, "matplotlib/matplotlib") or find_git(MIRRORS, "williamlus/matplotlib")  # or a fork
    if mpl is None or find_git(MIRRORS, "freetype/freetype") is None:
        pytest.skip(f"no matplotlib or freetype git mirror under {MIRRORS}")
    rec = next(r for r in json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())
               if r["repo"] == "matplotlib/matplotlib" and r["version"] == "3.7")
    commit = rec["environment_setup_commit"]
    prepared, notes = prepare_sources("matplotlib/matplotlib", mpl, commit, MIRRORS, tmp_path / "env", print)
    if "generating it needs" in notes["freetype"].get("error", ""):
        pytest.skip(notes["freetype"]["error"])  # no autotools on this machine
    assert prepared and notes["freetype"]["tag"] == "VER-2-6-1"
    src = tmp_path / "src"
    src.mkdir()
    (src / "setupext.py").write_bytes(subprocess.run(["git", "-C", str(mpl), "show", f"{commit}:setupext.py"],
                                                     capture_output=True, check=True).stdout)
    (src / "pybind11").mkdir()  # setupext imports pybind11's Extension class, which building freetype never uses
    (src / "pybind11" / "__init__.py").write_text("")
    (src / "pybind11" / "setup_helpers.py").write_text("Pybind11Extension = object\n")
    link_sources(src, prepared)
    env = {**os.environ, **build_environ("matplotlib/matplotlib", tmp_path, set(prepared))}
    build = "import os, setupext; setupext.FreeType().do_custom_build(dict(os.environ))"  # setup.py passes its env
    res = subprocess.run([sys.executable, "-c", build], cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert (tmp_path / "env" / "sources" / "freetype-2.6.1" / "objs" / ".libs" / "libfreetype.a").is_file()
