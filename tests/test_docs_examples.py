"""Every command block of README.md and docs/*.md marked `<!-- runnable -->` runs, in order, on a fresh clone's
terms: a new directory holding only the clone's configs/ and tests/ (no runs/, no models/), `../shared` beside it
when the shared data is there (commands that read it are skipped otherwise). Training and evaluation get tiny
budgets appended (later values win), so an example cannot silently rot but the whole test stays a few minutes.

A runnable block holds plain commands, one per line (a trailing `\\` continues a line, `#` starts a comment);
blocks run in file order, README.md first, in one directory, so a block may use what an earlier one made.
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- runnable -->"
BUDGET = {
    "train": ["sft.steps=2", "sft.warmup=0", "sft.batch_size=4", "rl.steps=1", "rl.prompts_per_step=2",
              "rl.group_size=2", "rl.warmup=0", "data.max_eval_tasks=2", "eval.n=1", "eval.k=[1]", "eval.every=0",
              "sampling.max_new_tokens=16", "verifier.workers=1", "log.plot=false", "log.progress=false"],
    "eval": ["--limit", "2", "--n", "1", "--k", "1", "--max-new-tokens", "16", "--workers", "1"],
}
"""Appended to `codechat train` / `codechat eval --model` commands (later options and overrides win)."""


def blocks(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, commands) of each runnable block in a Markdown file."""
    lines, out = path.read_text(encoding="utf-8").splitlines(), []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        assert lines[i + 1].startswith("```"), f"{path.name}:{i + 1}: {MARKER} must stand right above a code block"
        cmds, j = [], i + 2
        while not lines[j].startswith("```"):
            cmd = lines[j]
            while cmd.endswith("\\"):
                j += 1
                cmd = cmd[:-1] + lines[j]
            if shlex.split(cmd, comments=True):
                cmds.append(cmd)
            j += 1
        out.append((i + 2, cmds))
    return out


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def argv(cmd: str) -> list[str]:
    words = shlex.split(cmd, comments=True)
    assert words[0] == "codechat", f"runnable blocks hold codechat commands, not {words[0]!r}: {cmd}"
    words = [sys.executable, "-m", "codechat", *words[1:]]
    sub = words[3] if len(words) > 3 else ""
    if sub == "train" and "--print-config" not in words:
        words += BUDGET["train"]
    elif sub == "eval" and "--model" in words:
        words += BUDGET["eval"]
    return words


def test_every_runnable_block_is_plain_codechat_commands():
    found = [(p.name, n, c) for p in documents() for n, cmds in blocks(p) for c in cmds]
    assert len(found) >= 10 and {name for name, _, _ in found} >= {"README.md", "reference.md"}
    for name, n, cmd in found:
        argv(cmd)  # a codechat command that shlex can split


@pytest.mark.slow
def test_the_runnable_examples_of_readme_and_docs_run_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "codechat"
    clone.mkdir()
    for d in ("configs", "tests"):  # what the examples name from the clone
        (clone / d).symlink_to(ROOT / d)
    if SHARED.is_dir():  # the examples' ../shared/data
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "data").symlink_to(SHARED)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    failed, ran = [], 0
    for doc in documents():
        for line, cmds in blocks(doc):
            for cmd in cmds:
                if "../shared" in cmd and not SHARED.is_dir():
                    continue
                r = subprocess.run(argv(cmd), cwd=clone, env=env, capture_output=True, text=True, timeout=600)
                ran += 1
                if r.returncode != 0:
                    tail = (r.stderr.strip().splitlines() or [""])[-1]
                    failed.append(f"{doc.name}:{line}: {cmd}\n    exit {r.returncode}: {tail}")
    assert not failed, "\n".join(failed)
    assert ran >= 8
    assert re.search(r"step-\d+", " ".join(p.name for p in (clone / "runs" / "g1" / "checkpoints").iterdir()))
