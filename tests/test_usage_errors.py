"""Inputs that used to hang, print a traceback or do something silently now end with one line naming them
(exit status 2), before any slow work."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codechat import CodechatError
from codechat.cli import main
from codechat.config.io import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("override,message", [
    ("verifier.workers=-2", "verifier.workers: expected >= 0 (0 = one per CPU core), got -2"),
    ("verifier.timeout_s=0", "verifier.timeout_s: expected a positive number of seconds, got 0.0"),
    ("verifier.timeout_s=-1", "verifier.timeout_s: expected a positive number of seconds"),
    ("verifier.timeout_s=.nan", "verifier.timeout_s: expected a finite number, got nan"),
    ("eval.n=0", "eval.n: expected >= 1 (samples per task for pass@k), got 0"),
    ("eval.k=[1,8]", "eval.k: every k must be in 1..eval.n (4), got [1, 8]"),
    ("eval.k=[0]", "eval.k: every k must be in 1..eval.n"),
    ("model.device=tpu", "model.device: expected auto, cpu, cuda or cuda:N, got 'tpu'"),
])
def test_config_values_refused_with_the_allowed_range(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_device_names_outside_the_config_are_one_line_too():
    from codechat.policy.hf import pick_device
    with pytest.raises(CodechatError, match="device 'tpu': expected auto, cpu or cuda"):
        pick_device("tpu")


def test_train_without_arguments_prints_usage_and_trains_nothing(tmp_path):
    r = subprocess.run([sys.executable, "-m", "codechat", "train"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and r.stderr.startswith("usage: codechat train")
    assert "give --config FILE" in r.stderr and not (tmp_path / "runs").exists()


def write(path: Path, *recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_verify_negative_workers_and_missing_out_dir(tmp_path, capsys):
    tasks = write(tmp_path / "t.jsonl", {"task_id": "a", "prompt": "p", "tests": ["assert True"]})
    comps = write(tmp_path / "c.jsonl", {"task_id": "a", "completion": "x = 1"})
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(tmp_path / "r.jsonl"),
                 "--workers", "-1"]) == 2
    assert "--workers must be >= 0 (0 = one per CPU core), got -1" in capsys.readouterr().err
    out = tmp_path / "missing" / "r.jsonl"
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: directory {out.parent} does not exist" in err and err.count("\n") == 1


@pytest.mark.parametrize("content,message", [
    (b'{"task_id": "a", "prompt": "p", "tests": []}\n', "named .gz but not gzip-compressed"),
    (b"\x1f\x8b\x08\x00garbage", "cannot read"),
])
def test_not_gzip_gz_is_one_line(tmp_path, capsys, content, message):
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(content)
    assert main(["tasks", "show", str(p)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and str(p) in err


def test_eval_negative_workers_is_refused_not_a_hang(capsys):
    assert main(["eval", "--completions", "x.jsonl", "--tasks", "builtin:toy", "--workers", "-2"]) == 2
    assert "verifier workers must be >= 0 (0 = one per CPU core), got -2" in capsys.readouterr().err
    assert main(["eval", "--completions", "x.jsonl", "--tasks", "builtin:toy", "--timeout", "-1"]) == 2
    assert "--timeout must be a positive number of seconds, got -1.0" in capsys.readouterr().err
