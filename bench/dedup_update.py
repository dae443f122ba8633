"""Benchmark: the demo's GRPO update with and without the duplicate-aware update (rl.dedup), and its verification
with and without verify-once-per-program, at identical results, in one run.

    python bench/dedup_update.py                                  # a replay of a demo-like GRPO batch
    python bench/dedup_update.py --rollouts runs/demo/rollouts.jsonl --step 130   # a real demo step

Workload: the demo's configuration (`codechat/demos/demo.py`: the `tiny` preset, 16 prompts of builtin:synthetic-train
x 8 samples, max 96 new tokens, ppo-clip 0.2/0.28, 2 inner epochs, zero-variance groups skipped, lr 2e-4). The
completions are either a real run's (`--rollouts`: one step of a run's rollouts.jsonl, re-tokenized) or, by
default, a replay built like the demo's GRPO samples: each group draws from its task's reference solutions (three
styles) and the SFT set's buggy references (the demo's SFT data), so that `--dup` (default 0.585, what the demo's
GRPO stage measured) of the samples repeat another of their group. The verdicts are real (the sandbox).
The update starts from the same weights for both modes, `--repeats` times each, alternating (naive, dedup, naive,
...) so load drift hits both; seconds/step is the median. Identical results: after one update,
`rel_l2_weight_diff` = |w_dedup - w_naive| / |w_naive - w_start| (L2 over all parameters) and
`max_rel_metric_diff` over the update's metrics (loss, clip fractions, entropy, grad norm; `worst_metric`
names the largest; not the logp_gap_* ones, float noise in both modes here); float summation
order only (AdamW's first steps are ~ lr * sign(g), so a gradient entry near 0 can take either sign).
The last line is JSON: {"naive_update_s", "dedup_update_s", "ratio" (naive/dedup), "update_dup_frac" (rows of
the update that repeat another), "sample_dup_frac", "rel_l2_weight_diff", "max_rel_metric_diff", "worst_metric", "verify_plain_s",
"verify_dedup_s",
"verify_ratio", "verify_dedup_frac"}.
Simplified: the model is the freshly built `tiny` preset, not the demo's SFT'd one (the update's cost depends on
shapes, not on the weights); the sampler's log-probs are the model's own (as at temperature 1).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codechat.algos import compute_advantages, zero_variance_groups  # noqa: E402
from codechat.algos.dedup import find_duplicates  # noqa: E402
from codechat.config import VerifierConfig  # noqa: E402
from codechat.demos.demo import demo_config  # noqa: E402
from codechat.policy import completion_logprobs, load_policy  # noqa: E402
from codechat.policy.sampler import SampleBatch  # noqa: E402
from codechat.rollout.collect import Rollouts, prompt_text, score  # noqa: E402
from codechat.tasks import load_tasks  # noqa: E402
from codechat.train.checkpoint import TrainState  # noqa: E402
from codechat.train.common import Context, make_optimizer, pad, take  # noqa: E402
from codechat.train.rl import rl_update, stage_algo  # noqa: E402
from codechat.verifier.dedup import DedupVerifier  # noqa: E402
from codechat.verifier.verify import Verifier  # noqa: E402


def replay_groups(cfg, dup: float, seed: int) -> list[tuple[object, list[str]]]:
    """P (task, G completions) groups like the demo's GRPO samples, with a `dup` fraction of repeats."""
    P, G = cfg.rl.prompts_per_step, cfg.rl.group_size
    tasks = take(load_tasks(cfg.data.train), cfg.seed, 0, P)
    buggy: dict[str, list[str]] = {}
    for t in load_tasks(cfg.data.sft):
        if t.metadata.get("bug"):
            buggy.setdefault(t.task_id.split("#")[0], []).append(t.solution)
    rng = random.Random(seed)
    distinct_total = round(P * G * (1 - dup))
    per_group = [distinct_total // P + (i < distinct_total % P) for i in range(P)]
    groups = []
    for task, d in zip(tasks, per_group):
        pool = list(dict.fromkeys(list(task.metadata.get("solutions", {}).values()) + buggy.get(task.task_id, [])))
        rng.shuffle(pool)
        while len(pool) < d:  # a variant that differs in a comment only
            pool.append(pool[len(pool) % max(len(pool), 1)] + f"# v{len(pool)}\n")
        chosen = pool[:d]
        texts = chosen + [rng.choice(chosen) for _ in range(G - d)]
        rng.shuffle(texts)
        groups.append((task, texts))
    return groups


def rollouts_groups(path: Path, step: int | None, cfg) -> list[tuple[object, list[str]]]:
    """The groups of one step of a run's rollouts.jsonl (default: its last step)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    step = max(r["step"] for r in rows) if step is None else step
    by_id = {t.task_id: t for t in load_tasks(cfg.data.train)}
    groups: dict[int, tuple[object, list[str]]] = {}
    for r in rows:
        if r["step"] == step:
            groups.setdefault(r["group"], (by_id[r["task_id"]], []))[1].append(r["completion"])
    if not groups:
        raise SystemExit(f"{path}: no samples at step {step}")
    return [groups[g] for g in sorted(groups)]


def build_rollouts(policy, groups, cfg) -> Rollouts:
    """Tokenize the completions (+ EOS, cut at max_new_tokens) into a SampleBatch; sampler log-probs = model's."""
    tok, eos, T = policy.tokenizer, policy.tokenizer.eos_token_id, cfg.sampling.max_new_tokens
    prompts = [policy.encode_prompt(prompt_text(t)) for t, _ in groups]
    seqs, idx, texts, finish = [], [], [], []
    for gi, (_, comps) in enumerate(groups):
        for c in comps:
            ids = tok(c, add_special_tokens=False)["input_ids"] + [eos]
            finish.append("stop" if len(ids) <= T else "length")
            seqs.append(ids[:T])
            idx.append(gi)
            texts.append(c)
    tokens, mask = pad(seqs, tok.pad_token_id)
    index = torch.tensor(idx)
    with torch.no_grad():
        logprobs = completion_logprobs(policy.model, prompts, index, tokens, mask)  # (N, T)
    batch = SampleBatch(index, tokens, mask, logprobs, finish, texts, mask.sum(1).long())
    return Rollouts([t for t, _ in groups], prompts, batch, [None] * len(seqs), torch.zeros(len(seqs)))


def verify(r: Rollouts, cfg, workers: int) -> tuple[list, float, float, float]:
    """Verdicts (plain), plain seconds, dedup seconds, dedup fraction; fails if the verdicts differ."""
    pairs = [(r.task_of(i), r.batch.texts[i]) for i in range(len(r.batch.texts))]
    vcfg = VerifierConfig(workers=workers)
    with Verifier(vcfg) as v:
        v.verify_many(pairs[:2])  # warm the pool
        t0 = time.perf_counter()
        plain = v.verify_many(pairs)
        t1 = time.perf_counter()
        d = DedupVerifier(v)
        deduped = d.verify_many(pairs)
        t2 = time.perf_counter()
    if [x.status for x in plain] != [x.status for x in deduped]:
        raise SystemExit("verdicts differ between plain and dedup verification")
    return plain, t1 - t0, t2 - t1, d.last.dedup_frac


def update_batch(policy, groups, cfg, workers: int):
    """The demo GRPO step's update inputs for `groups`: (rollouts verified and scored, algo, advantages (N,), the
    rows trained (zero-variance groups skipped, as the demo), (plain s, dedup s, dedup frac) of verification)."""
    r = build_rollouts(policy, groups, cfg)
    r.verdicts, *vtimes = verify(r, cfg, workers)
    r.rewards, r.components = score([r.task_of(i) for i in range(len(r.verdicts))], r.batch.texts, r.verdicts,
                                    [int(n) for n in r.batch.n_tokens],
                                    [f == "length" for f in r.batch.finish_reason],
                                    cfg.sampling.max_new_tokens, cfg.rewards)
    algo = stage_algo(cfg, "grpo")
    adv = compute_advantages(algo.advantage, r.rewards, r.group_ids, algo)  # (N,)
    zv, _ = zero_variance_groups(r.rewards, r.group_ids)
    return r, algo, adv, torch.arange(len(r.verdicts))[~zv], tuple(vtimes)


def bench_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The options every demo-update bench has (--repeats, --threads, --seed); parses and sets the threads."""
    ap.add_argument("--repeats", type=int, default=3, help="timed updates per variant")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    return args


def demo_policy(run_dir: str, seed: int):
    """The demo's config (run_dir) and its freshly initialised policy under `seed`."""
    cfg = demo_config(run_dir=run_dir)
    torch.manual_seed(seed)
    return cfg, load_policy(cfg.model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rollouts", type=Path, help="replay one step of this rollouts.jsonl instead")
    ap.add_argument("--step", type=int, help="with --rollouts: the global step (default: the last)")
    ap.add_argument("--dup", type=float, default=0.585, help="replay: fraction of samples repeating their group's")
    ap.add_argument("--workers", type=int, default=2, help="verifier workers")
    args = bench_args(ap)
    with tempfile.TemporaryDirectory() as tmp:
        cfg, policy = demo_policy(tmp, args.seed)
        groups = rollouts_groups(args.rollouts, args.step, cfg) if args.rollouts else \
            replay_groups(cfg, args.dup, args.seed)
        r, algo, adv, rows, (v_plain, v_dedup, v_frac) = update_batch(policy, groups, cfg, args.workers)
        upd_frac = find_duplicates(r.group_ids[rows], r.batch.tokens[rows], r.batch.mask[rows], adv[rows]).frac
        smp_frac = find_duplicates(r.group_ids, r.batch.tokens, r.batch.mask).frac
        start = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
        times: dict[bool, list[float]] = {False: [], True: []}
        after: dict[bool, dict] = {}
        mets: dict[bool, dict] = {}
        for rep in range(args.repeats):
            for dedup in (False, True):
                policy.model.load_state_dict(start)
                cfg.rl.dedup = dedup
                ctx = Context(cfg, policy, None, None, None, TrainState(), Path(tmp), [])
                opt, _ = make_optimizer(policy.model, cfg.rl.lr, cfg.rl.warmup, cfg.rl.steps, cosine=False,
                                        cfg=cfg.optim)
                policy.model.train()
                t0 = time.perf_counter()
                met = rl_update(ctx, r, adv[rows], rows, None, opt, algo)
                times[dedup].append(time.perf_counter() - t0)
                if rep == 0:
                    after[dedup] = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
                    mets[dedup] = met
        step = torch.cat([(after[False][k] - start[k]).flatten() for k in start])  # the naive update
        gap = torch.cat([(after[True][k] - after[False][k]).flatten() for k in start])
        rel_l2 = (gap.norm() / step.norm().clamp_min(1e-30)).item()
        # logp_gap_*: |sampler - policy| log-probs, here the model's own twice: float noise (~1e-6) in both modes,
        # its relative difference is noise over noise; every other metric is compared
        diffs = {k: abs(mets[True][k] - mets[False][k]) / max(abs(mets[False][k]), 1e-6)
                 for k in mets[False] if k != "update/dedup_frac" and not k.startswith("logp_gap_")}
        worst = max(diffs, key=diffs.get)
        met_diff = diffs[worst]
    naive, fast = statistics.median(times[False]), statistics.median(times[True])
    print(f"samples {len(r.verdicts)}, in the update {len(rows)} (zero-variance groups skipped); duplicates: "
          f"{smp_frac:.1%} of samples, {upd_frac:.1%} of update rows")
    print(f"update s/step: naive {naive:.3f}  dedup {fast:.3f}  ({naive / fast:.2f}x); after one update: "
          f"|w_dedup - w_naive| / |w_naive - w_start| = {rel_l2:.1e} (L2), metrics differ by <= {met_diff:.1e} (rel, {worst})")
    print(f"verify s: plain {v_plain:.3f}  dedup {v_dedup:.3f}  ({v_plain / max(v_dedup, 1e-9):.2f}x), "
          f"verify/dedup_frac {v_frac:.3f}")
    print(json.dumps({"naive_update_s": round(naive, 4), "dedup_update_s": round(fast, 4),
                      "ratio": round(naive / fast, 3), "update_dup_frac": round(upd_frac, 4),
                      "sample_dup_frac": round(smp_frac, 4), "rel_l2_weight_diff": rel_l2,
                      "max_rel_metric_diff": met_diff, "worst_metric": worst,
                      "verify_plain_s": round(v_plain, 4), "verify_dedup_s": round(v_dedup, 4),
                      "verify_ratio": round(v_plain / max(v_dedup, 1e-9), 3), "verify_dedup_frac": round(v_frac, 4)}))


if __name__ == "__main__":
    main()
