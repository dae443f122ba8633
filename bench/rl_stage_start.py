"""How large is the first update of an RL stage? KL after one RL step from a stage start, with a warm-up of W
steps, and with AdamW fresh (what every stage does) or carried over from the previous stage's checkpoint.

    OMP_NUM_THREADS=1 python bench/rl_stage_start.py RUN tiny OUT w0:0:fresh w10:10:fresh w0-carried:0:carried

RUN: a run whose last checkpoint ends the stage before RL (the demo's `stages=[sft,rft]`: its RFT end, with the
RFT stage's AdamW state in trainer.pt); `tiny` or a Qwen family picks the demo's settings (codechat/demos/demo.py).
Each variant NAME:W:fresh|carried[:override,...] runs `codechat probe`'s real arm for one step
(train/placebo.py) and reports the trainer's logged `kl` of that step (with the demo's rl.epochs=2 the KL after
the first optimizer step on the step's own samples is twice it), the KL of the new model from the start on 32
train tasks x 8 fresh samples both ways, and pass@1 there. `carried` loads the previous stage's AdamW moments
and step counts (the lr and schedule stay the RL stage's). Ends with one JSON line {NAME: {...}}.
"""
import json
import sys
from pathlib import Path

import torch

from codechat.demos.demo import DEMO, QWEN
from codechat.policy.fsdp import load_optimizer_state
from codechat.train import rl
from codechat.train.placebo import run_probe

torch.set_num_threads(1)
run, kind, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
ck = sorted((run / "checkpoints").glob("step-*"))[-1]  # the stage before RL ends here
saved = torch.load(ck / "trainer.pt", weights_only=False)["optimizer"]
fresh_optimizer = rl.make_optimizer
base = DEMO + (QWEN if kind != "tiny" else [])
res = {}
for v in sys.argv[4:]:
    name, warm, state, *extra = v.split(":")

    def make(model, lr, warmup, total, cosine, cfg, embed_scale=1.0, _state=state):
        opt, sched = fresh_optimizer(model, lr, warmup, total, cosine, cfg, embed_scale)
        if _state == "carried":
            lrs = [g["lr"] for g in opt.param_groups]
            load_optimizer_state(model, opt, saved)
            for g, lr_now in zip(opt.param_groups, lrs):  # the RL stage's lr and schedule, the old moments
                g["lr"], g["initial_lr"] = lr_now, lr
        return opt, sched

    rl.make_optimizer = make
    ov = base + [f"rl.warmup={warm}", "log.progress=false"] + (extra[0].split(",") if extra else [])
    r = run_probe(ov, None, str(ck / "model"), 1, out / name, tasks=32, n=8, ks=(1, 8), arms=("real",), force=True)
    res[name] = {"logged_kl": r["real"].get("first_step_kl"), "kl": r["real"]["kl"],
                 "kl_from_start": r["real"]["kl_from_start"], "pass@1": r["real"]["pass@1"],
                 "start_pass@1": r["start"]["pass@1"]}
    print(name, res[name], flush=True)
print(json.dumps(res))
