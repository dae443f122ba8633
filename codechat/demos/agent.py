"""The agent demo (`codechat demo --agent`): a tiny model learns to fix small repositories with tools, on CPU.

    tokenizer + `tiny` preset -> SFT on expert transcripts -> eval -> RFT -> eval -> GRPO on episodes -> eval
                                                                                                  (held-out)

The SFT data are expert episodes on `builtin:repo-train` (read the file -> run the tests -> write the fix -> run
the tests -> submit), played for real in the sandbox, with a seeded share (`sft.expert_wrong`) that writes a
plausible but wrong fix: imitation learns the habit and some wrong fixes, and GRPO on whole episodes (the
hidden-test judgement as the reward of every model token) has something left to teach. Each task has 4
transcripts, half of them wrong (`sft.expert_per_task`), and each fix is one `replace_function` call
(`sft.expert_edit=function`: the function named in the issue, rewritten whole; no text of the unseen held-out file
has to be copied exactly, which is what made every `edit` of the held-out tasks fail): the SFT policy then fixes
a task some of the time rather than always or never, so GRPO's groups have variance.
Evaluation is sampled (T=1), `AGENT_EVAL_N` episodes per task of `builtin:repo-heldout` ((unit, bug) pairs never
trained on), reporting resolve@1, resolve@n and the habits: tested-before-submit share, protected-file edit
attempts, turns.

Then one round of RFT on episodes (64 train tasks x 4 episodes, the passing ones kept, 40 steps of SFT on their
model tokens; measured, it lifted held-out resolve@1 from 31.3% to 50.8%, docs/results/agent-history.md), and
GRPO from the RFT model. The model is evaluated after each stage, so the table shows what GRPO adds over RFT
alone on the same run (`resolve_change(run_dir, "rft", "grpo")`).

Three trainer runs under RUN_DIR (`sft/`; `rft/` from sft's final weights; `grpo/` from rft's, skipped when
`rl.steps=0`) and an evaluation after each (`eval-sft/`, `eval-rft/`, `eval-grpo/`: summary.json and every
episode in samples.jsonl).
`AGENT_QUICK` shrinks it to about 10 minutes on 6 train tasks, evaluated on the same tasks. `agent_table` is the
stage table; `write_agent_report` writes RUN_DIR/report.md and resolve.png.

Simplifications: evaluation runs between the trainer runs (the trainer does not evaluate repository sets
itself); each run starts a fresh optimizer; the wall-time column is the demo's own clock, so two runs with one
seed give the same table apart from it (`agent_table(rows, times=False)`).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import yaml

from codechat.config import ModelConfig
from codechat.config.io import load_config
from codechat.evaluation.repo_eval import evaluate_episodes
from codechat.evaluation.stats import paired_bootstrap
from codechat.io.plotting import figure, save
from codechat.policy import load_policy
from codechat.rollout.agents import ModelAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.train import train
from codechat.train.metrics import read_metrics
from codechat.verifier.repo import RepoJudge

AGENT: list[str] = [
    "model.path=tiny-agent", "agent.call_format=compact",
    "data.train=builtin:repo-train", "data.eval=",
    "sampling.temperature=1.0",
    "agent.turn_tokens=200", "agent.max_live=64", "agent.wall_budget=false",
    "sft.steps=300", "sft.lr=2e-3", "sft.batch_size=16", "sft.warmup=10", "sft.expert_wrong=0.5",
    "sft.expert_per_task=4", "sft.expert_edit=function",
    "rft.prompts=64", "rft.group_size=4", "rft.steps=40", "rft.lr=5e-4", "rft.batch_size=16",
    "algo.advantage=grpo", "algo.loss=ppo-clip", "algo.kl_beta=0.0",
    "rl.steps=10", "rl.warmup=2", "rl.lr=1e-4", "rl.prompts_per_step=8", "rl.group_size=4",
    "rl.zero_variance=skip", "rl.mask_truncated=true",
    # The tied 4,096-row table stays fixed in GRPO (as in the Qwen-shaped demo): the best of five variants from
    # the RFT model on the train split (docs/results/agent-rl-signal.md).
    "rl.embed_lr_scale=0",
    "log.audit=false", "log.plot=false", "checkpoint.every=0", "checkpoint.keep_last=1",
]
"""The agent demo's settings, as `codechat train` overrides shared by its three runs (docs/agent.md)."""

END = "rft+grpo"
"""The last run's row name in the table: GRPO after the RFT round."""

RUNS = ("sft", "rft", "grpo")
"""The demo's trainer runs in order: each starts from the previous one's final weights."""

AGENT_EVAL = "builtin:repo-heldout"
AGENT_EVAL_N = 4
"""Held-out set and sampled episodes per task of each evaluation."""

AGENT_QUICK: list[str] = ["data.train=builtin:repo-mini", "sft.steps=150", "sft.batch_size=4", "sft.lr=3e-3",
                          "sft.expert_wrong=0.5", "rft.prompts=6", "rft.steps=10", "rft.batch_size=4",
                          "rl.steps=4", "rl.prompts_per_step=3", "rl.group_size=4",
                          "rl.lr=1e-4"]
AGENT_SHORT: list[str] = ["sft.steps=100", "sft.batch_size=2", "rft.prompts=1", "rft.group_size=12",
                          "rft.steps=10", "rft.batch_size=4", "rl.steps=0"]
"""Overrides on top of AGENT_QUICK for the ~70 s run on repo-mini's first task only (8 episodes per evaluation):
the suite's rise test and `bench/agent_short.py`."""

AGENT_QUICK_EVAL_N = 4
"""`--quick`: 6 train tasks, SFT on 4 expert transcripts per task (2 with a wrong fix), evaluated on the same 6
tasks (4 episodes each: with 2 a single episode moves resolve@1 by 8 points). 150 SFT steps: the tiny model
writes well-formed compact calls after ~60-70 (docs/agent.md, "The agent demo")."""


@dataclass
class AgentRow:
    """One line of the agent demo table: the evaluation after a stage."""

    stage: str
    """`sft`, `rft` or `rft+grpo`: the run evaluated."""
    resolve1: float
    """Resolve rate pass@1, sampled at T=1 (mean over the evaluation's episodes per task)."""
    resolvek: float
    """pass@n over the n episodes per task."""
    k: int
    """That n."""
    tested_before_submit: float
    """Share of episodes whose last run_tests came after their last edit."""
    protected_attempts: float
    """Attempts to change a protected (test) file, per episode."""
    submitted: float
    """Share of episodes that called submit."""
    turns: float
    """Model turns per episode."""
    time_s: float
    """Demo wall time at the end of this stage's evaluation (cumulative)."""


def agent_settings(quick: bool = False) -> list[str]:
    """The overrides the agent demo applies before a run's own: AGENT (+ AGENT_QUICK)."""
    return AGENT + (AGENT_QUICK if quick else [])


def agent_config(run_dir: str, stage: str, quick: bool = False, overrides: list[str] | None = None):
    """The RunConfig of one of the demo's trainer runs (RUNS: sft, rft, grpo): AGENT (+ AGENT_QUICK), the stage
    in RUN_DIR/STAGE from the previous run's final weights, then the overrides."""
    if stage not in RUNS:
        raise ValueError(f"agent demo run {stage!r}: expected one of {', '.join(RUNS)}")
    extra = [f"stages=[{stage}]", f"run_dir={run_dir}/{stage}"]
    if stage != "sft":
        extra.append(f"model.path={run_dir}/{RUNS[RUNS.index(stage) - 1]}")
    return load_config(None, agent_settings(quick) + extra + list(overrides or []))


def evaluate_stage(cfg, model_dir: Path, eval_spec: str, n: int, out: Path, limit: int = 0) -> dict:
    """n sampled episodes per task of eval_spec (its first `limit` tasks; 0 = all) with the model of model_dir ->
    metrics (also in OUT/)."""
    policy = load_policy(replace(ModelConfig(), path=str(model_dir), device=cfg.model.device))
    tasks = load_repo_tasks(eval_spec)[:limit or None]
    with RepoJudge() as judge:
        agent = ModelAgent(policy, replace(cfg.sampling, temperature=1.0))
        report = evaluate_episodes(EpisodeRunner(agent, judge, cfg.agent), tasks, n, sorted({1, n}), seed=cfg.seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"metrics": report.metrics, "per_task": report.per_task}, indent=1))
    with open(out / "samples.jsonl", "w") as f:
        for s in report.samples:
            f.write(json.dumps(s) + "\n")
    return report.metrics


def row(stage: str, m: dict, n: int, t: float) -> AgentRow:
    return AgentRow(stage, m["resolve@1"], m[f"resolve@{n}"], n, m["tested_before_submit"],
                    m["protected_attempts"], m["submitted"], m["turns"], t)


def _change(a: AgentRow, b: AgentRow, times: bool) -> str:
    return (f"| **{b.stage} - {a.stage}** | **{(b.resolve1 - a.resolve1) * 100:+.1f} pts** | "
            f"{(b.resolvek - a.resolvek) * 100:+.1f} pts | "
            f"{(b.tested_before_submit - a.tested_before_submit) * 100:+.1f} pts | "
            f"{b.protected_attempts - a.protected_attempts:+.2f} | "
            f"{(b.submitted - a.submitted) * 100:+.1f} pts | {b.turns - a.turns:+.1f} |" + (" |" if times else ""))


def agent_table(rows: list[AgentRow], times: bool = True) -> str:
    """Markdown table of the stage rows, the change from SFT to the end and, with three rows, the last stage's
    own change (GRPO over RFT alone); the wall time column unless times is False: everything else repeats
    exactly with the same seed."""
    k = rows[0].k if rows else 1
    head = f"| stage | resolve@1 (T=1) | resolve@{k} | tested before submit | protected edits / ep | submitted | " \
           f"turns |" + (" wall time |" if times else "")
    out = [head, "|---" * (7 + times) + "|"]
    for r in rows:
        out.append(f"| {r.stage} | {r.resolve1:.1%} | {r.resolvek:.1%} | {r.tested_before_submit:.1%} | "
                   f"{r.protected_attempts:.2f} | {r.submitted:.1%} | {r.turns:.1f} |"
                   + (f" {r.time_s / 60:.1f} min |" if times else ""))
    if len(rows) > 1:
        out.append(_change(rows[0], rows[-1], times))
    if len(rows) > 2:
        out.append(_change(rows[-2], rows[-1], times))
    return "\n".join(out)


def plot_resolve(run_dir: Path, rows: list[AgentRow], what: str) -> Path:
    """resolve.png: the GRPO run's train pass rate per step, with the evaluations before it (at step 0) and
    after it."""
    fig, ax = figure(8, 4)
    pts = [(r["step"], r["pass_rate"]) for r in read_metrics(run_dir / "grpo")
           if r.get("pass_rate") is not None and r.get("stage") == "grpo"] if (run_dir / "grpo").is_dir() else []
    if pts:
        ax.plot(*zip(*pts), label="train resolve rate (GRPO episodes, T=1)", alpha=0.6)
    last = pts[-1][0] if pts else 1
    for r, m in zip(rows, ("o", "^", "s")):
        ax.plot([last if r.stage == END else 0], [r.resolve1], marker=m, ls="",
                label=f"{what} resolve@1 after {r.stage}")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("resolve rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return save(fig, run_dir / "resolve.png")


def resolve_change(run_dir: Path, a: str = "sft", b: str = "grpo") -> str:
    """The resolve@1 change from eval-A/ to eval-B/ with its 95% paired bootstrap interval over the tasks (each
    task's c/n in both): how much of the table's difference the evaluation's sampling could explain. "" when
    either evaluation is missing or they share no task."""
    paths = [run_dir / f"eval-{s}" / "summary.json" for s in (a, b)]
    if not all(p.is_file() for p in paths):
        return ""
    per = [json.loads(p.read_text())["per_task"] for p in paths]
    ids = sorted(set(per[0]) & set(per[1]))
    if not ids:
        return ""
    x, y = ([p[i]["c"] / p[i]["n"] for i in ids] for p in per)
    ci = paired_bootstrap(x, y)
    return (f"resolve@1 change {a} -> {b} {ci.diff * 100:+.1f} pts, 95% paired bootstrap interval over the {ci.n} "
            f"tasks {ci.lo * 100:+.1f} to {ci.hi * 100:+.1f} pts.")


def write_agent_report(run_dir: Path, rows: list[AgentRow], command: str, eval_spec: str, train_spec: str) -> Path:
    what = f"{eval_spec} (= train)" if eval_spec == train_spec else "held-out"
    png = plot_resolve(run_dir, rows, what)
    cfg = yaml.safe_load((run_dir / "sft" / "config.yaml").read_text())
    rft = yaml.safe_load((run_dir / "rft" / "config.yaml").read_text())
    rl = rft["rl"]
    runs = [s for s in RUNS if (run_dir / s).is_dir()]
    text = [f"# codechat demo --agent: {run_dir}", "", f"Command: `{command}` (seed {cfg.get('seed')})", "",
            f"Evaluation: `{eval_spec}` ({'the training set' if eval_spec == train_spec else 'held-out'}), "
            f"{rows[0].k} sampled episodes per task (T=1).", "",
            agent_table(rows), "", resolve_change(run_dir, "sft", runs[-1]),
            resolve_change(run_dir, "rft", "grpo") and "GRPO over RFT alone: " + resolve_change(run_dir, "rft", "grpo"),
            "", f"![resolve rate]({png.name})", "",
            f"SFT: expert transcripts of `{train_spec}`, `sft.expert_wrong` = {cfg['sft']['expert_wrong']}; "
            f"Then on `{train_spec}`: RFT, {rft['rft']['rounds']} round(s) of {rft['rft']['prompts']} tasks x "
            f"{rft['rft']['group_size']} episodes (passing ones kept, {rft['rft']['steps']} steps); "
            + (f"GRPO, {rl['steps']} steps x {rl['prompts_per_step']} tasks x {rl['group_size']} episodes at lr "
               f"{rl['lr']} ({rl['warmup']} warm-up steps)." if "grpo" in runs else "no GRPO (rl.steps=0)."),
            "",
            f"Files: {', '.join(s + '/' for s in runs)} (trainer runs: config.yaml, metrics.jsonl), "
            f"{', '.join('eval-' + s + '/' for s in runs)} (summary.json, samples.jsonl: every episode turn by turn).",
            "", f"Next: `codechat eval --model {run_dir}/{runs[-1]} --tasks {eval_spec} --n 4 --k 1,4`", ""]
    (run_dir / "rows.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    path = run_dir / "report.md"
    path.write_text("\n".join(text))
    return path


def run_agent_demo(run_dir: str, quick: bool = False, overrides: list[str] | None = None,
                   command: str = "codechat demo --agent", eval_n: int = 0) -> tuple[Path, list[AgentRow]]:
    """SFT -> eval -> RFT -> eval -> GRPO -> eval (GRPO and its evaluation skipped at rl.steps=0); returns
    (run_dir, the table rows: sft, rft, rft+grpo) and writes report.md, resolve.png. eval_n: episodes per task of
    each evaluation (0 = AGENT_EVAL_N, or AGENT_QUICK_EVAL_N with quick)."""
    t0 = time.monotonic()
    root = Path(run_dir)
    cfgs = {s: agent_config(run_dir, s, quick, overrides) for s in RUNS}
    if cfgs["grpo"].rl.steps == 0:
        del cfgs["grpo"]
    train_spec = cfgs["sft"].data.train
    eval_spec, n = (train_spec, AGENT_QUICK_EVAL_N) if quick else (AGENT_EVAL, AGENT_EVAL_N)
    n = eval_n or n
    rows = []
    for stage, cfg in cfgs.items():
        train(cfg)
        m = evaluate_stage(cfg, root / stage, eval_spec, n, root / f"eval-{stage}")
        rows.append(row(END if stage == "grpo" else stage, m, n, time.monotonic() - t0))
    write_agent_report(root, rows, command, eval_spec, train_spec)
    return root, rows
