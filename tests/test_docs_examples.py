"""Every command block of README.md and docs/*.md marked `<!-- runnable -->` runs, in order, on a fresh clone's
terms: a new directory holding only the clone's configs/ and tests/ (no runs/, no models/), `../shared` beside it
when the shared data is there (commands that read it are skipped otherwise). Training and evaluation get tiny
budgets appended (later values win), so an example cannot silently rot but the whole test stays a few minutes.

A runnable block holds plain commands, one per line (a trailing `\\` continues a line, `#` starts a comment);
blocks run in file order, README.md first, in one directory, so a block may use what an earlier one made.

Each command runs in its own process, as `codechat ...` would, but forked from a runner that imported codechat,
torch and transformers once (this file run as a script): the imports were ~3.5 s of CPU of every command's ~6.
The runner itself runs no torch op before forking, so no thread pool is forked half-made.
"""
import atexit
import importlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import traceback
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
    """The command's arguments after `codechat`, with the tiny budgets appended."""
    words = shlex.split(cmd, comments=True)
    assert words[0] == "codechat", f"runnable blocks hold codechat commands, not {words[0]!r}: {cmd}"
    words = words[1:]
    sub = words[0] if words else ""
    if sub == "train" and "--print-config" not in words:
        words += BUDGET["train"]
    elif sub == "eval" and "--model" in words:
        words += BUDGET["eval"]
    return words


WARM = ("codechat.cli", "codechat.commands.train", "codechat.commands.tasks", "codechat.commands.plot",
        "codechat.commands.eval", "codechat.train.runner", "codechat.policy.hf",
        "transformers.models.llama.modeling_llama", "transformers.tokenization_utils_fast")
"""What the runner imports before forking a command (each command still imports what it needs)."""


def run_forked(jobs: list[list[str]], cwd: Path, logs: Path, timeout_s: float) -> list[dict]:
    """Run `codechat ARGS` for each of `jobs` in turn, each in a child forked from this warmed process, in `cwd`
    with stdout and stderr to `logs/N.log`; {"rc", "wall_s", "cpu_s"} per job (rc 124: killed at `timeout_s`)."""
    for name in WARM:
        importlib.import_module(name)
    from codechat.cli import main
    from codechat.policy.presets import preset_key
    preset_key("tiny")  # the tokenizer corpus hash, computed once for all commands
    results = []
    for i, args in enumerate(jobs):
        log = logs / f"{i}.log"
        sys.stdout.flush(), sys.stderr.flush()
        t0, pid = time.time(), os.fork()
        if pid == 0:  # the child: become `codechat ARGS` in cwd, in its own process group
            rc = 1
            try:
                os.setpgid(0, 0)
                os.chdir(cwd)
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1), os.dup2(fd, 2)
                sys.argv = ["codechat", *args]
                try:
                    rc = main(args)
                except SystemExit as e:
                    rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                atexit._run_exitfuncs()  # what a process's normal exit runs (pools, temp files)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os._exit(rc if isinstance(rc, int) else 1)
        rc = None
        while rc is None:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                cpu = usage.ru_utime + usage.ru_stime
            elif time.time() - t0 > timeout_s:
                os.killpg(pid, signal.SIGKILL)
                _, _, usage = os.wait4(pid, 0)
                rc, cpu = 124, usage.ru_utime + usage.ru_stime
            else:
                time.sleep(0.05)
        results.append({"rc": rc, "wall_s": round(time.time() - t0, 2), "cpu_s": round(cpu, 2), "log": str(log)})
    return results


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
    runs = [(doc, line, cmd) for doc in documents() for line, cmds in blocks(doc) for cmd in cmds
            if SHARED.is_dir() or "../shared" not in cmd]
    (tmp_path / "logs").mkdir()
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": [argv(cmd) for _, _, cmd in runs], "cwd": str(clone),
                                                    "logs": str(tmp_path / "logs"), "timeout_s": 600}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, __file__, str(tmp_path / "jobs.json")], env=env, cwd=clone,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(results) == len(runs) >= 8
    failed = []
    for (doc, line, cmd), res in zip(runs, results):
        print(f"{res['wall_s']:7.1f} s wall {res['cpu_s']:6.1f} s cpu  {doc.name}:{line}: {cmd[:80]}")
        if res["rc"] != 0:
            tail = (Path(res["log"]).read_text(errors="replace").strip().splitlines() or [""])[-1]
            failed.append(f"{doc.name}:{line}: {cmd}\n    exit {res['rc']}: {tail}")
    assert not failed, "\n".join(failed)
    assert re.search(r"step-\d+", " ".join(p.name for p in (clone / "runs" / "g1" / "checkpoints").iterdir()))


if __name__ == "__main__":  # the runner: python tests/test_docs_examples.py JOBS.json -> one JSON line of results
    spec = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(run_forked(spec["jobs"], Path(spec["cwd"]), Path(spec["logs"]), spec["timeout_s"])))
