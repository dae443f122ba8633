"""Answers verified per second: codechat's AnswerChecker (exact rules in-process, math-verify in killable worker
processes) against plain math-verify called in-process on every pair (its usual use), on the same generated pairs.

    python bench/answer_verify.py [--pairs 10000] [--workers 1,2] [--baseline-limit 2000] [--seed 0]
Pairs come from builtin:arith-train tasks: per task, the reference answer rewritten in another form (a decimal
for a fraction, `x = 5`, roots reordered or as a set, an expansion in \\left( \\right)) or a wrong answer, each
inside a short completion. Ends with one JSON line: {"pairs", "checker": {workers: answers_per_s}, "baseline_per_s",
"baseline_pairs", "speedup", "agreement", "symbolic_share", "passed_share"}.
"""
import argparse
import json
import random
import time
from fractions import Fraction

from codechat.config import AnswerConfig
from codechat.tasks.arith import generate
from codechat.verifier.answer import AnswerChecker, references
from codechat.verifier.answer_extract import extract_answer, plain_number

ap = argparse.ArgumentParser()
ap.add_argument("--pairs", type=int, default=10_000)
ap.add_argument("--workers", default="1,2")
ap.add_argument("--baseline-limit", type=int, default=2000, help="pairs the (slower) baseline verifies")
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()


def variant(task, rng: random.Random) -> str:
    """A completion whose final answer is the reference in another form, or a wrong answer."""
    ans, name = task.metadata["answer"], task.metadata["template"]
    value = plain_number(ans)
    wrong = rng.random() < 0.4
    if value is not None:
        q = value[0] + (rng.choice([1, -1, Fraction(1, 7)]) if wrong else 0)
        form = rng.choice(["frac", "decimal", "plain"]) if q.denominator in (1, 2, 4, 5, 8, 10, 20, 25) else "frac"
        text = (f"\\frac{{{q.numerator}}}{{{q.denominator}}}" if form == "frac" and q.denominator != 1 else
                str(float(q)) if form == "decimal" else str(q))
        if name == "linear" and rng.random() < 0.5:
            text = f"x = {text}"
    elif name == "roots":
        lo, hi = ans.split(", ")
        hi = str(int(hi) + 1) if wrong else hi
        text = rng.choice([f"{hi}, {lo}", f"\\{{{hi}, {lo}\\}}", f"x = {lo}, {hi}"])
    else:  # expand: the same polynomial in parentheses, or a changed constant
        text = ans if not wrong else ans[:-1] + str((int(ans[-1]) + 1) % 10)
        if not wrong and rng.random() < 0.5:
            text = f"\\left({ans}\\right)"
    return rng.choice([f"So the answer is \\boxed{{{text}}}.", f"Therefore $\\boxed{{{text}}}$", f"#### {text}"])


rng = random.Random(args.seed)
tasks = generate("train", 1000, seed=args.seed)
pairs = [(t, variant(t, rng)) for t in (tasks[i % len(tasks)] for i in range(args.pairs))]

results, checker_verdicts = {}, None
for w in [int(x) for x in args.workers.split(",")]:
    with AnswerChecker(AnswerConfig(workers=w)) as c:
        c.check_many(pairs[:50])  # start the workers (about a second each) outside the timing
        t0 = time.perf_counter()
        verdicts = c.check_many(pairs)
        results[w] = round(len(pairs) / (time.perf_counter() - t0), 1)
        checker_verdicts = checker_verdicts or verdicts

from math_verify import parse, verify  # noqa: E402 - the baseline library (math-verify), only for the comparison

n_base = min(args.baseline_limit, len(pairs))
t0 = time.perf_counter()
base = []
for task, completion in pairs[:n_base]:
    gold = parse("\\boxed{" + references(task)[0] + "}")
    found = extract_answer(completion)
    base.append(verify(gold, parse(f"${found.text}$" if found else completion)))
baseline_per_s = n_base / (time.perf_counter() - t0)
agree = sum(b == v.passed for b, v in zip(base, checker_verdicts)) / n_base
symbolic = sum("symbolic" in v.message for v in checker_verdicts) / len(pairs)
print(json.dumps({"pairs": len(pairs), "checker": results, "baseline_per_s": round(baseline_per_s, 1),
                  "baseline_pairs": n_base, "speedup": round(max(results.values()) / baseline_per_s, 2),
                  "agreement": round(agree, 4), "symbolic_share": round(symbolic, 3),
                  "passed_share": round(sum(v.passed for v in checker_verdicts) / len(pairs), 3)}))
