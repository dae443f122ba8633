"""The run directory under usual mistakes: a live run refuses a second run, a --force and a --resume into it; a
stale lock of a dead process is taken over with a message; a failed start writes nothing, so the corrected
command runs; --force keeps the old run until the new one's inputs load and replaces only codechat runs; under
torchrun rank 0 holds the lock and every rank stops when it is taken; a forked child that outlives its run does
not keep the lock."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codechat.cli import main
from codechat.config import DistConfig
from codechat.train import dist
from codechat.train.runlock import LOCK_NAME, RunLock
from codechat.train.runner import _claim
from train_helpers import run_ranks

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "log.progress=false", "log.plot=false",
        "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=2", "stages=[grpo]", "rl.steps=1"]

HOLD = ("import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, str(os.getpid()).encode())\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n")
"""A process that holds a run directory's lock the way a live run does (flock, its pid in the file)."""


def hold(run: Path) -> subprocess.Popen:
    run.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(run / LOCK_NAME)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def metrics_steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_live_run_refuses_a_second_run_a_force_and_a_resume(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["train", *BASE, f"run_dir={run}"]) == 0
    before = (run / "metrics.jsonl").read_text()
    holder = hold(run)
    try:
        for argv in (["train", *BASE, f"run_dir={run}", "seed=5", "--force"], ["train", "--resume", str(run)],
                     ["train", *BASE, f"run_dir={run}", "seed=5"]):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert f"a run is in progress there (pid {holder.pid}" in err and len(err.strip().splitlines()) == 1
        assert (run / "metrics.jsonl").read_text() == before  # the live run's files untouched
        assert (run / "checkpoints" / "step-0000001").is_dir()
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_is_taken_over_with_a_message(tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    pid = dead_pid()
    (run / LOCK_NAME).write_text(f"{pid}\n")  # a run killed with SIGKILL leaves this behind
    assert main(["train", *BASE, f"run_dir={run}"]) == 0
    assert f"taking over the run directory from pid {pid}" in capsys.readouterr().err
    assert not (run / LOCK_NAME).exists() and metrics_steps(run) == [1]


@pytest.mark.slow
def test_a_killed_run_resumes_after_its_lock_goes_stale(tmp_path, capsys):
    """A real second process: while it trains, --force into its directory is refused; after SIGKILL its lock is
    stale and --resume takes the directory over."""
    run = tmp_path / "r"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-m", "codechat", "train", *BASE[:-1], "rl.steps=500",
                              "checkpoint.every=1", f"run_dir={run}"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "step-0000001").is_dir():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() else ""
            time.sleep(0.2)
        assert main(["train", *BASE, f"run_dir={run}", "--force"]) == 2
        assert f"pid {first.pid}" in capsys.readouterr().err
    finally:
        first.kill()
        first.wait()
    assert main(["train", "--resume", str(run), "rl.steps=2"]) == 0
    assert f"from pid {first.pid}" in capsys.readouterr().err


def test_a_failed_start_writes_nothing_and_the_corrected_command_runs(tmp_path, capsys):
    run = tmp_path / "runs" / "r"
    for typo in ("data.train=builtin:toyy", f"model.path={tmp_path / 'no-such-model'}"):
        assert main(["train", *BASE, f"run_dir={run}", typo]) == 2
        assert not run.parent.exists()  # no config.yaml to block the retry or be replayed by --resume
        capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["train", *BASE, f"run_dir={run}"]) == 0
    assert metrics_steps(run) == [1]


def test_force_keeps_the_old_run_until_the_new_inputs_load_and_says_what_it_deletes(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["train", *BASE, f"run_dir={run}"]) == 0
    (run / "notes.txt").write_text("mine")
    assert main(["train", *BASE, f"run_dir={run}", "data.train=builtin:toyy", "--force"]) == 2
    assert (run / "checkpoints" / "step-0000001" / "state.json").is_file() and metrics_steps(run) == [1]
    capsys.readouterr()
    assert main(["train", *BASE, f"run_dir={run}", "seed=3", "--force"]) == 0
    err = capsys.readouterr().err
    assert f"--force: deleting the earlier run in {run}: config.yaml, metrics.jsonl" in err
    assert "checkpoints/ (1)" in err and (run / "notes.txt").read_text() == "mine"


def test_force_refuses_a_directory_that_is_not_a_codechat_run(tmp_path, capsys):
    other = tmp_path / "resnet"
    (other / "checkpoints").mkdir(parents=True)
    (other / "checkpoints" / "epoch-3.pt").write_bytes(b"weights")
    (other / "config.yaml").write_text("model: resnet50\nepochs: 90\n")
    assert main(["train", *BASE, f"run_dir={other}", "--force"]) == 2
    assert "does not look like a codechat run" in capsys.readouterr().err
    assert (other / "checkpoints" / "epoch-3.pt").is_file() and (other / "config.yaml").is_file()


def _claim_rank(rank: int, world: int, port: int, run: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init(DistConfig(backend="gloo"))
    out = Path(run).parent / f"rank{rank}.txt"
    try:
        lock, _ = _claim(Path(run), resume=False, force=False)
        out.write_text(f"locked {lock is not None} {(Path(run) / LOCK_NAME).read_text().strip()}")
        dist.barrier()
        if lock is not None:
            lock.release()
    except Exception as e:  # noqa: BLE001 -- the test reads what each rank raised
        out.write_text(f"refused {e}")
    dist.close()


def test_under_torchrun_rank_0_holds_the_lock_and_every_rank_stops_when_it_is_taken(tmp_path):
    run = tmp_path / "r"
    run_ranks(_claim_rank, str(run))
    r0, r1 = (tmp_path / "rank0.txt").read_text(), (tmp_path / "rank1.txt").read_text()
    assert r0.startswith("locked True ") and r1 == f"locked False {r0.split()[-1]}"  # rank 0's pid, once
    holder = hold(run)
    try:
        run_ranks(_claim_rank, str(run))
        assert (tmp_path / "rank0.txt").read_text().startswith(f"refused {run}: a run is in progress there")
        assert (tmp_path / "rank1.txt").read_text().startswith("refused ")
    finally:
        holder.kill()
        holder.wait()


def test_a_forked_child_that_outlives_the_run_does_not_hold_its_lock(tmp_path):
    """A sandbox worker forked while the lock is held keeps running after its run is SIGKILLed: the next run
    still gets the directory (flock belongs to the open file, which fork would share)."""
    run = tmp_path / "r"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "from codechat.train.runlock import RunLock\n"
        "RunLock.acquire(sys.argv[1])\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(60); os._exit(0)\n"
        "print(child, flush=True); time.sleep(60)\n"), str(run)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    try:
        os.kill(child, 0)  # still running
        lock = RunLock.acquire(run)  # its copy of the fd was closed at the fork
        lock.release()
    finally:
        os.kill(child, signal.SIGKILL)
