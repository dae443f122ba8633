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


COMMANDS_PENDING: set[str] = set()
"""Command modules whose docstring is owned by another branch at the time of writing (its lazy imports are for
the same reason, see bench/cli_startup.py); remove a name once its docstring says why."""


def test_every_function_local_codechat_import_says_why():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        local = _local_codechat_imports(tree)
        if not local:
            continue
        rel = path.relative_to(ROOT)
        src = text.splitlines()
        if path.parent.name == "commands" and not all(_says_why(src, n) for n in local):
            # a command module gives the reason once, in its docstring
            if "codechat --help" not in (ast.get_docstring(tree) or "") and path.name not in COMMANDS_PENDING:
                unexplained.append(f"{rel}: imports inside functions, and no docstring line naming `codechat --help`")
            continue
        unexplained += [f"{rel}:{n}: {src[n - 1].strip()}" for n in local if not _says_why(src, n)]
    assert not unexplained, "function-local codechat imports without a reason:\n" + "\n".join(unexplained)


LIGHT = ["codechat.cli", "codechat.tasks", "codechat.tasks.builtin", "codechat.verifier.factory",
         "codechat.verifier.evalplus", "codechat.evaluation.evaluate", "codechat.rollout.audit",
         "codechat.rollout.agents", "codechat.sandbox.pool"]
"""Modules that commands and light paths (scoring completions, `codechat tasks`, `verify`, `audit`) load:
they must not pull in torch or matplotlib."""


def test_light_modules_and_every_command_module_load_without_torch_or_matplotlib():
    code = ("import importlib, sys\n"
            "from codechat.commands import COMMANDS\n"
            f"for m in {LIGHT!r} + list(COMMANDS.values()): importlib.import_module(m)\n"
            "print(sorted(m for m in ('torch', 'matplotlib', 'transformers') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"heavy libraries imported by a light module: {out.stdout.strip()}"
