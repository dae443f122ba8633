"""`codechat plot` and `codechat audit` on a run still being written: a half-written last line is left out with a
warning, a damaged middle line is a one-line error; the plot is a grid, one metric per panel, one loss panel per
stage on its own axis, stages shaded."""
from __future__ import annotations

import json

import pytest

from codechat import CodechatError
from codechat.cli import main
from codechat.io.plotting import panels, plot_run, stage_spans
from codechat.io.runlog import read_jsonl


def rows():
    out = [{"step": s, "time": s, "stage": "sft", "loss": 8.0 - s, "lr": 1e-3} for s in range(1, 6)]
    out[-1].update({"eval/pass@1": 0.2, "eval/greedy_pass@1": 0.3, "eval/pass@8": 0.5})
    out += [{"step": s, "time": s, "stage": "grpo", "loss": -0.01 * s, "reward_mean": 0.1 * s, "pass_rate": 0.1,
             "kl": 0.001, "zero_var_frac": 0.5} for s in range(5, 11)]
    out[-1].update({"eval/pass@1": 0.4, "eval_basic/pass@1": 0.9})
    return out


def write_run(tmp_path, records, tail=""):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return tmp_path


def test_panels_one_metric_each_and_a_loss_per_stage():
    got = [(k, stage) for k, _, _, stage in panels(rows())]
    assert got[:4] == [("eval/pass@1", None), ("eval/greedy_pass@1", None), ("eval/pass@8", None),
                       ("eval_basic/pass@1", None)]
    assert ("loss", "sft") in got and ("loss", "grpo") in got and ("loss", None) not in got
    assert len(got) == len(set(got))
    assert stage_spans(rows()) == [("sft", 0.5, 5.5), ("grpo", 5.5, 10.5)]  # step 5 logged by both: no overlap


def test_plot_writes_a_grid(tmp_path, capsys):
    run = write_run(tmp_path, rows(), tail='{"step": 11, "loss"')  # the run is writing its next line
    assert main(["plot", str(run)]) == 0
    assert "incomplete last line left out" in capsys.readouterr().err
    import matplotlib.image as mpimg
    img = mpimg.imread(run / "curves.png")
    assert img.shape[1] > img.shape[0] > 400  # 4 columns x 3 rows of panels


def test_damaged_middle_line_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2\n{"step": 3}\n')
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/metrics.jsonl:2: malformed metrics line" in err and err.count("\n") == 1
    with pytest.raises(CodechatError, match="expected a JSON object"):
        (tmp_path / "x.jsonl").write_text("[1]\n")
        read_jsonl(tmp_path / "x.jsonl")


def test_audit_on_a_half_written_last_line(tmp_path, capsys):
    rec = {"step": 1, "task_id": "t", "reward": 1.0, "status": "passed", "reason": "suspicious: imports os",
           "completion": "import os"}
    (tmp_path / "audit.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(rec)[:20])
    assert main(["audit", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "1 samples kept over 1 steps, 1 flagged" in out.out and "incomplete last line" in out.err
