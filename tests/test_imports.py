"""Import hygiene: a function-local codechat import says why it is local, and light modules stay light.

Imports belong at the top of a module (STYLE.md habit 15). One stays inside a function only for a reason a
reader should see: an import cycle, a heavy dependency (torch, matplotlib, vllm) kept off a light path, or the
sandbox zygote's import budget. The reason is a comment on the import (or on the line just above its group);
the CLI's command modules give theirs in one line of their docstring, naming `codechat --help`.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from codechat import cli
from codechat.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "codechat"


def _local_codechat_imports(tree: ast.Module) -> list[int]:
    """Line numbers of `import codechat...` / `from codechat... import` statements inside a function."""
    lines = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "codechat" \
                    or isinstance(node, ast.Import) and any(a.name.split(".")[0] == "codechat" for a in node.names):
                lines.append(node.lineno)
    return sorted(set(lines))


def _says_why(src: list[str], lineno: int) -> bool:
    """A comment on the import, on another import of its group, or on the line just above the group."""
    i = lineno - 1
    while i > 0 and src[i - 1].strip().startswith(("from ", "import ")):
        i -= 1  # to the first import of the group
    j = lineno - 1
    while j + 1 < len(src) and src[j + 1].strip().startswith(("from ", "import ")):
        j += 1
    group = src[i:j + 1]
    above = src[i - 1].strip() if i > 0 else ""
    return any("#" in line for line in group) or above.startswith("#")


def test_the_checker_tells_a_bare_local_import_from_an_explained_one():
    bare = "def f():\n    from codechat import x\n    return x\n"
    explained = "def f():\n    # torch: heavy\n    from codechat import x\n    from codechat import y\n    return x\n"
    inline = "def f():\n    import codechat.policy  # torch\n"
    top = "from codechat import x\n\ndef f():\n    return x\n"
    for src, ok in ((bare, False), (explained, True), (inline, True)):
        for lineno in _local_codechat_imports(ast.parse(src)):
            assert _says_why(src.splitlines(), lineno) is ok, src
    assert _local_codechat_imports(ast.parse(top)) == []


def test_every_function_local_codechat_import_says_why():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        local = _local_codechat_imports(ast.parse(text))
        src = text.splitlines()
        rel = path.relative_to(ROOT)
        unexplained += [f"{rel}:{n}: {src[n - 1].strip()}" for n in local if not _says_why(src, n)]
    assert not unexplained, "function-local codechat imports without a reason:\n" + "\n".join(unexplained)


LIGHT = ["codechat.cli", "codechat.tasks", "codechat.tasks.builtin", "codechat.verifier.factory",
         "codechat.verifier.evalplus", "codechat.evaluation.evaluate", "codechat.rollout.audit",
         "codechat.rollout.agents", "codechat.sandbox.pool", "codechat.commands.tasks", "codechat.commands.verify",
         "codechat.commands.audit", "codechat.commands.eval", "codechat.commands.repo",
         "codechat.commands.repo_verify"]
"""Modules of the light paths (scoring completions or patch files, `codechat tasks`, `verify`, `audit`, `eval
--completions`, scripted repository agents): they must not pull in torch or matplotlib."""


def _heavy_after(code: str) -> str:
    code += "\nimport sys\nprint(sorted(m for m in ('torch', 'matplotlib', 'transformers') if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_light_modules_load_without_torch_or_matplotlib():
    heavy = _heavy_after(f"import importlib\nfor m in {LIGHT!r}: importlib.import_module(m)")
    assert heavy == "[]", f"heavy libraries imported by a light module: {heavy}"


def test_codechat_help_imports_no_command_module_and_lists_every_command():
    code = ("import contextlib, io, sys\nfrom codechat import cli\nbuf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):\n    cli.main(['--help'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('codechat.commands.')))\nprint(buf.getvalue())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    loaded, text = out.stdout.split("\n", 1)
    assert loaded == "[]", f"`codechat --help` imported command modules: {loaded}"
    for name, cmd in COMMANDS.items():
        assert name in text and cmd.help[:40] in " ".join(text.split()), name


def test_a_command_gets_its_own_arguments_and_an_unknown_one_is_refused(capsys):
    assert cli.main(["tasks", "list"]) == 0
    assert "toy" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["nosuchcommand"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    assert "--regress" in capsys.readouterr().out
