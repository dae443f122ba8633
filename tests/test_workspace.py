"""Workspaces: cheap clones that never alter their base, confined paths, isolated commands; diffs round-trip."""
import os
import sys
import time

import pytest
from hypothesis import given, settings, strategies as st

from codechat.sandbox.workspace import (Trash, Workspace, WorkspaceError, run_isolated, safe_path, scratch_dir,
                                         write_tree)
from codechat.sandbox.isolation import rmtree
from codechat.verifier.patches import PatchError, apply_diff, make_diff, parse_diff
from sandbox_helpers import alive_with_uid


@pytest.fixture()
def ws():
    d = scratch_dir()
    base = d / "base"
    base.mkdir()
    write_tree(base, {"a.py": "x = 1\n", "pkg/b.py": "y = 2\n"})
    w = Workspace.clone(base, d, "w")
    yield w
    rmtree(str(d))


def test_write_replaces_never_touches_base(ws):
    ws.write("a.py", "x = 99\n")
    ws.write("new/c.py", "z = 3\n")
    assert (ws.base / "a.py").read_text() == "x = 1\n"
    assert ws.changes() == {"a.py": "x = 99\n", "new/c.py": "z = 3\n"}
    (ws.root / "pkg" / "b.py").unlink()
    assert ws.changes()["pkg/b.py"] is None


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../x", "", "~/x", "a\\b", "x\x00y", "a" * 300])
def test_paths_outside_are_refused(ws, bad):
    with pytest.raises(WorkspaceError):
        ws.read(bad)


def test_symlinks_are_not_followed(ws):
    os.symlink("/etc", ws.root / "etc")
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.read("etc/passwd")
    assert "etc" not in " ".join(ws.listing())


@pytest.mark.skipif(os.geteuid() != 0, reason="own uid and read-only workspace need root")
def test_command_cannot_write_workspace_nor_reach_network(ws):
    code = ("import socket\ntry:\n    open('a.py', 'w').write('hacked')\nexcept OSError as e:\n    print('write', type(e).__name__)\n"
            "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\nexcept OSError as e:\n    print('net', type(e).__name__)\n")
    r = run_isolated([sys.executable, "-I", "-c", code], ws.root, timeout_s=10)
    assert r.status == "ok" and ("write PermissionError" in r.output or "write OSError" in r.output)  # EROFS
    assert "net" in r.output
    assert (ws.root / "a.py").read_text() == "x = 1\n"


def test_trash_removes_workspaces_in_the_background(ws):
    trash = Trash()
    others = [Workspace.clone(ws.base, ws.root.parent, f"w{i}") for i in range(3)]
    for w in others:
        trash.put(w)
    trash.close()  # waits for the last removal
    assert not any(w.root.exists() for w in others) and ws.root.exists()
    late = Workspace.clone(ws.base, ws.root.parent, "late")
    trash.put(late)  # after close: removed at once
    assert not late.root.exists()


def test_command_deadline_output_cap_and_children_reaped(ws):
    r = run_isolated([sys.executable, "-I", "-c", "while True: pass"], ws.root, timeout_s=1)
    assert r.status == "timeout" and r.duration_s < 5
    r = run_isolated([sys.executable, "-I", "-c", "print('x' * 100000)"], ws.root, timeout_s=10, max_output_bytes=100)
    assert r.truncated and len(r.output) == 100
    code = ("import os, subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
            " start_new_session=True)\nprint('uid', os.getuid())")
    r = run_isolated([sys.executable, "-I", "-c", code], ws.root, timeout_s=10)
    uid = int(r.output.split()[-1])
    if os.geteuid() == 0:  # everything of the command's own uid is killed afterwards, even a new session
        assert uid >= 1_000_000
        for _ in range(50):  # killed processes can linger a moment as zombies until their new parent reaps them
            if not alive_with_uid(uid):
                break
            time.sleep(0.1)
        assert not alive_with_uid(uid)


texts = st.lists(st.sampled_from(["a", "b", "c", "", "x = 1", "  y"]), max_size=8).map(lambda ls: "\n".join(ls))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["a.py", "d/b.py", "c.txt"]), texts, max_size=3),
       st.dictionaries(st.sampled_from(["a.py", "d/b.py", "c.txt", "new.py"]), st.one_of(st.none(), texts), max_size=3))
def test_diff_round_trip(before, changes):
    changes = {p: t for p, t in changes.items() if not (t is None and p not in before) and before.get(p) != t}
    if not changes:
        return
    assert apply_diff(make_diff(before.get, changes), before.get) == changes


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_diff_parser_raises_only_patch_error(text):
    try:
        for fp in parse_diff(text):
            assert safe_path(fp.path) == fp.path
    except PatchError:
        pass


def test_diff_errors_name_the_line():
    with pytest.raises(PatchError, match="line 3: malformed hunk"):
        parse_diff("--- a/x\n+++ b/x\n@@ nope @@\n")
    with pytest.raises(PatchError, match="'..'"):
        parse_diff("--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(PatchError, match="does not match"):
        apply_diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", lambda p: "zzz\n")


def test_an_interpreter_behind_a_symlinked_venv_dir_runs(tmp_path, monkeypatch):
    """`.venv -> /elsewhere/venv` (a clone sharing a venv): the fresh root binds resolved paths only, so the
    links on the way to the interpreter are recreated inside it (it failed with FileNotFoundError before)."""
    venv = os.path.dirname(os.path.dirname(sys.executable))
    link = tmp_path / "venvlink"
    link.symlink_to(venv, target_is_directory=True)
    linked = str(link / os.path.relpath(sys.executable, venv))
    monkeypatch.setattr(sys, "executable", linked)
    ws = tmp_path / "ws"
    ws.mkdir()
    res = run_isolated([sys.executable, "-c", "print(6 * 7)"], ws, timeout_s=20)
    assert res.output.strip().endswith("42"), res.output


@pytest.mark.skipif(not (os.path.isfile("/usr/bin/xelatex") and os.path.isdir("/var/lib/texmf")),
                    reason="no TeX Live with xelatex on this host")
def test_a_command_runs_xelatex_with_the_tex_trees_formats_and_cannot_write_them(ws):
    # Debian's TeX tree under /usr links its formats and file databases in /var/lib/texmf: without them
    # xelatex stops at "I can't find the format file" (matplotlib's pgf tests need it)
    ws.write("t.tex", "\\documentclass{article}\\usepackage{pgf}\\begin{document}\\typeout{pgf=\\pgfversion}"
                      "\\makeatletter\\@@end\n")
    code = ("import os, subprocess, tempfile\nd = tempfile.mkdtemp()\n"
            "r = subprocess.run(['/usr/bin/xelatex', '-halt-on-error', '-output-directory', d, 't.tex'], "
            "capture_output=True, text=True)\nprint('rc', r.returncode, r.stdout[-300:])\n"
            "try:\n    open('/var/lib/texmf/x', 'w')\nexcept OSError as e:\n    print('write', type(e).__name__)\n")
    r = run_isolated([sys.executable, "-I", "-c", code], ws.root, timeout_s=60)
    assert r.status == "ok" and "rc 0" in r.output and "pgf=3." in r.output, r.output
    assert "write" in r.output and not os.path.exists("/var/lib/texmf/x")
