"""The placebo control (`codechat probe`): what did the reward teach, beyond what the update's noise did?

    codechat probe --model RUN --demo tiny --steps 20 --out runs/probe
    codechat probe --model MODEL --config C.yaml --steps 30 --out runs/probe rl.lr=5e-5

From one model, N RL steps of the config's RL stage twice, with the same seeds: `real` (the run's advantages)
and `placebo` (`rl.placebo`: each step's advantages shuffled across the samples the loss sees, so the update has
the same size and shape but the reward no longer says which sample earned what). Then the start model and each
arm's final model are sampled on the first `tasks` training tasks, `n` samples each at the sampling temperature,
with one seed for all three: train pass@1 and pass@k, the drift from the start model both ways (token-mean k3
estimates: KL(arm || start) on the arm's samples, KL(start || arm) on the start's), and the token-mean entropy.
real - placebo: the paired bootstrap interval over tasks of pass@1 and pass@k (evaluation/stats.py).

An update that is too large shows as a placebo arm far below the start; a reward with signal as real above
placebo; learning as real above the start. Simplifications: single answers only (repository episodes:
bench/agent_grpo_probe.py --placebo); one seed; the train split, so it says what the update learnt on the
prompts it saw, not how it generalises.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codechat import CodechatError
from codechat.algos import kl_penalty, masked_mean
from codechat.config import RunConfig
from codechat.config.io import load_config
from codechat.evaluation.evaluate import pass_at_k
from codechat.evaluation.stats import paired_bootstrap
from codechat.io.rundir import resolve_model
from codechat.policy import Sampler, completion_logprobs, load_policy
from codechat.rollout.collect import collect
from codechat.tasks.repo_loaders import is_repo_spec
from codechat.train.metrics import read_metrics
from codechat.train.runner import load_task_sets, train
from codechat.verifier.factory import make_verifier

ARMS = ("real", "placebo")
RL_STAGES = ("grpo", "rloo")


@dataclass
class ArmReport:
    """One model sampled on the probe's tasks: per-task pass counts, drift from the start model, entropy."""

    name: str
    """start, real or placebo."""
    passes: dict[str, int]
    """task id -> passing samples of n."""
    n: int
    """Samples per task."""
    kl: float
    """Token-mean k3 estimate of KL(model || start model) on the model's own samples (0 for the start)."""
    entropy: float
    """Token-mean entropy (nats) of the model's next-token distributions on its own samples."""
    kl_from_start: float = 0.0
    """Token-mean k3 estimate of KL(start model || model) on the start model's samples: large when the update
    made answers the start model samples unlikely (what a reverse-KL penalty on the rollouts sees)."""
    step_pass_rates: list[float] = field(default_factory=list)
    """The RL run's pass rate per step (empty for the start)."""
    first_step_kl: float | None = None
    """The trainer's logged `kl` of the run's first step, when algo.kl_beta > 0: the mean over the step's
    forwards of the KL to the start on the step's own samples (with rl.epochs=2, one optimizer step: the first
    forward's is 0, so the KL after the first optimizer step is twice this)."""

    def per_task(self, k: int) -> dict[str, float]:
        """task id -> unbiased pass@k estimate."""
        return {t: pass_at_k(self.n, c, k) for t, c in self.passes.items()}

    def summary(self, ks: list[int]) -> dict:
        out = {f"pass@{k}": sum(self.per_task(k).values()) / max(len(self.passes), 1) for k in ks}
        out |= {"kl": self.kl, "kl_from_start": self.kl_from_start, "entropy": self.entropy}
        if self.step_pass_rates:
            out["step_pass_rates"] = [round(p, 4) for p in self.step_pass_rates]
        if self.first_step_kl is not None:
            out["first_step_kl"] = self.first_step_kl
        return out


def drift(model, other, r, temperature: float, chunk: int = 64) -> tuple[float, float]:
    """On rollouts r sampled from `model`: the token-mean k3 estimate of KL(model || other) (0 when other is None)
    and the token-mean entropy of `model`'s next-token distributions, `chunk` rows per forward."""
    b, kl_sum, ent_sum, count = r.batch, 0.0, 0.0, 0.0
    with torch.no_grad():
        for s in range(0, len(r.verdicts), chunk):
            rows = slice(s, s + chunk)
            args = (r.prompts, b.prompt_index[rows], b.tokens[rows], b.mask[rows].float())
            lp, ent = completion_logprobs(model, *args, temperature=temperature, with_entropy=True)  # (c, T)
            m = b.mask[rows].float()  # (c, T)
            w = m.sum().item()
            ent_sum += masked_mean(ent, m).item() * w
            if other is not None:
                ref = completion_logprobs(other, *args, temperature=temperature)  # (c, T)
                kl_sum += masked_mean(kl_penalty(lp, ref, "k3"), m).item() * w
            count += w
    return kl_sum / max(count, 1.0), ent_sum / max(count, 1.0)


def measure(policy, start, verifier, tasks, n: int, sampling, seed: int, name: str):
    """Sample n completions per task from `policy` (seeded) and verify them -> (ArmReport, the rollouts). start:
    None when the policy is the start model, else (the start model, the start model's rollouts) for the drift
    both ways: KL(policy || start) on the policy's samples, KL(start || policy) on the start's."""
    r = collect(policy, Sampler(policy), verifier, tasks, n, sampling, seed=seed)
    passes = {t.task_id: 0 for t in tasks}
    for i, ok in enumerate(r.passed.tolist()):
        passes[r.task_of(i).task_id] += int(ok)
    temp = sampling.temperature if sampling.temperature > 0 else 1.0
    policy.model.eval()
    kl, ent = drift(policy.model, start[0] if start else None, r, temp)
    back = drift(start[0], policy.model, start[1], temp)[0] if start else 0.0
    return ArmReport(name, passes, n, kl, ent, kl_from_start=back), r


def probe_configs(overrides: list[str], config: str | None, model: str, steps: int, out: Path,
                  arms=ARMS) -> dict[str, RunConfig]:
    """{arm: RunConfig}: the config file + overrides, then the probe's own settings (one RL stage of `steps`
    from `model`, no evaluation or periodic checkpoints, run_dir OUT/ARM, rl.placebo for the placebo arm)."""
    base = load_config(config, overrides)
    stage = next((s for s in base.stages if s in RL_STAGES), "grpo")
    forced = [f"stages=[{stage}]", f"model.path={model}", f"rl.steps={steps}", "data.eval=", "data.extra_eval=[]",
              "eval.every=0", "checkpoint.every=0", "checkpoint.keep_last=1", "log.plot=false"]
    return {arm: load_config(config, overrides + forced + [f"run_dir={out / arm}", f"rl.placebo={arm == 'placebo'}"])
            for arm in arms}


def run_probe(overrides: list[str], config: str | None, model: str, steps: int, out: str | Path, tasks: int = 32,
              n: int = 8, ks: tuple[int, ...] = (1, 8), arms=ARMS, force: bool = False, seed: int = 1234) -> dict:
    """Train each arm, measure the start model and each arm's final model, write OUT/probe.json; returns it."""
    out, model = Path(out), resolve_model(model)
    if steps < 1:
        raise CodechatError(f"--steps {steps}: expected at least 1 RL step")
    if any(k > n for k in ks):
        raise CodechatError(f"--k {','.join(map(str, ks))}: each k must be <= --n {n}")
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise CodechatError(f"--arms {','.join(arms)}: expected some of {', '.join(ARMS)}")
    cfgs = probe_configs(list(overrides), config, model, steps, out, arms)
    spec = next(iter(cfgs.values())).data.train
    if is_repo_spec(spec):
        raise CodechatError(f"data.train={spec}: repository episodes are probed by bench/agent_grpo_probe.py "
                            f"--placebo; codechat probe measures single answers")
    for arm, cfg in cfgs.items():
        train(cfg, force=force)
    cfg0 = next(iter(cfgs.values()))
    train_tasks = load_task_sets(cfg0)[0][:tasks] if tasks > 0 else load_task_sets(cfg0)[0]
    start = load_policy(dataclasses.replace(cfg0.model, path=model))
    start.model.eval()
    reports = []
    with make_verifier(cfg0.verifier) as verifier:
        rep, start_rollouts = measure(start, None, verifier, train_tasks, n, cfg0.sampling, seed, "start")
        reports.append(rep)
        for arm, cfg in cfgs.items():
            policy = load_policy(dataclasses.replace(cfg.model, path=resolve_model(str(out / arm))))
            rep, _ = measure(policy, (start.model, start_rollouts), verifier, train_tasks, n, cfg.sampling, seed, arm)
            logged = [m for m in read_metrics(out / arm) if m.get("pass_rate") is not None]
            rep.step_pass_rates = [m["pass_rate"] for m in logged]
            rep.first_step_kl = logged[0].get("kl") if logged else None
            reports.append(rep)
    result = report(reports, list(ks)) | {"model": model, "steps": steps, "tasks": len(train_tasks), "n": n,
                                          "overrides": list(overrides), "config": config}
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps(result, indent=1))
    return result


def report(reports: list[ArmReport], ks: list[int]) -> dict:
    """{ARM: summary} for each report, and when both arms are there, `real-placebo`: {pass@k: paired bootstrap
    {diff, lo, hi, n}} over the tasks."""
    by = {r.name: r for r in reports}
    out = {name: r.summary(ks) for name, r in by.items()}
    if "real" in by and "placebo" in by:
        diff = {}
        for k in ks:
            real, plac = by["real"].per_task(k), by["placebo"].per_task(k)
            ids = sorted(real)
            ci = paired_bootstrap([plac[t] for t in ids], [real[t] for t in ids])
            diff[f"pass@{k}"] = {"diff": ci.diff, "lo": ci.lo, "hi": ci.hi, "n": ci.n}
        out["real-placebo"] = diff
    return out


def format_report(result: dict) -> str:
    """The probe's table: one row per model, then real - placebo with its interval."""
    ks = [k for k in result["start"] if k.startswith("pass@")]
    lines = [f"{'':8} " + " ".join(f"{k:>8}" for k in ks) + f" {'KL':>8} {'KL back':>8} {'entropy':>8}"]
    for name in ("start", *ARMS):
        if name in result:
            r = result[name]
            lines.append(f"{name:8} " + " ".join(f"{r[k]:8.3f}" for k in ks)
                         + f" {r['kl']:8.4f} {r['kl_from_start']:8.4f} {r['entropy']:8.3f}")
    for k, d in result.get("real-placebo", {}).items():
        lines.append(f"real - placebo {k}: {d['diff']:+.3f} (95% paired CI {d['lo']:+.3f} to {d['hi']:+.3f}, "
                     f"{d['n']} tasks)")
    return "\n".join(lines)
