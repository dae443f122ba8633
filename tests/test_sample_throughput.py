"""bench/sample_throughput.py --dtype: bfloat16 runs both sides in bf16 as their users run them (ours loaded with
model.compute_dtype=bfloat16, generate under CPU bf16 autocast), says so in its JSON line, and stops in one line
on a CPU without native bf16."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from codechat.policy import precision
from codechat.policy.precision import KERNEL_CACHE_VARS

ROOT = Path(__file__).resolve().parents[1]
TINY_RUN = ["-P", "2", "-G", "2", "--new", "4", "--repeats", "1"]


def load_bench():
    spec = importlib.util.spec_from_file_location("sample_throughput", ROOT / "bench" / "sample_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_bench(mod, monkeypatch, capsys, args):
    """mod.main() on `args` -> (its JSON line, the compute dtype ours was loaded with, autocast dtype of each
    generate call: None when off)."""
    loaded, gen_dtypes = [], []
    real_load = mod.load_policy

    def load(cfg):
        loaded.append(cfg.compute_dtype)
        policy = real_load(cfg)
        real_generate = policy.model.generate

        def generate(**kw):
            gen_dtypes.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
            return real_generate(**kw)

        policy.model.generate = generate
        return policy

    monkeypatch.setattr(mod, "load_policy", load)
    for var in KERNEL_CACHE_VARS:  # load_policy sets them for bf16 compute: not past this test
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "argv", ["sample_throughput.py", *args])
    mod.main()
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1]), loaded[0], gen_dtypes


@pytest.mark.skipif(not precision.bf16_native("cpu"), reason="bf16 is emulated on this CPU: the bench stops there")
def test_bfloat16_runs_both_sides_in_bf16(monkeypatch, capsys):
    out, ours, gen = run_bench(load_bench(), monkeypatch, capsys, [*TINY_RUN, "--dtype", "bfloat16"])
    assert out["dtype"] == "bfloat16" and out["ours_tok_s"] > 0 and out["hf_tok_s"] > 0 and out["gemm_gflops"] > 0
    assert ours == "bfloat16"
    assert gen and all(d == torch.bfloat16 for d in gen)  # the warm-up and the timed call


def test_float32_is_the_default_without_autocast(monkeypatch, capsys):
    out, ours, gen = run_bench(load_bench(), monkeypatch, capsys, TINY_RUN)
    assert out["dtype"] == "float32" and ours == "" and gen == [None, None]


def test_bfloat16_stops_in_one_line_without_native_bf16(monkeypatch):
    mod = load_bench()
    monkeypatch.setattr(mod, "bf16_native", lambda device: False)
    monkeypatch.setattr(sys, "argv", ["sample_throughput.py", *TINY_RUN, "--dtype", "bfloat16"])
    with pytest.raises(SystemExit, match=r"^sample_throughput: cpu has no native bf16 .*skipped$"):
        mod.main()


@pytest.mark.parametrize("flag", [[], ["--no-native"]])
def test_no_native_runs_ours_on_torch_ops(monkeypatch, capsys, flag):
    """--no-native: ours with sampling.native_kernels off, said in the JSON line (on by default where they build)."""
    from codechat.policy import cattn
    from codechat.policy.sampler import Sampler

    mod = load_bench()
    seen = []
    real = Sampler.sample
    monkeypatch.setattr(Sampler, "sample", lambda self, p, n, cfg, **kw: seen.append(cfg.native_kernels)
                        or real(self, p, n, cfg, **kw))
    out, _, _ = run_bench(mod, monkeypatch, capsys, [*TINY_RUN, *flag])
    assert set(seen) == {not flag}
    assert out["native_kernels"] == (not flag and cattn.kernel() is not None)
