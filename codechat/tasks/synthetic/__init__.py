"""The synthetic task family the CPU demo trains on: seeded, generated, compositional Python problems.

Three families compose primitives (see primitives.py):
  list   filter x map x reduce over `xs` or over the numbers 1..n  "keeps the numbers in xs that are even, squares
         them and returns their sum"
  str    filter x map x (join | reversed | count) over the characters of `s`
  arith  condition x then-map x else-map on an integer `n`        "returns n plus 3 if n is even, otherwise n"
Level = number of operations (1-3). Splits differ by composition: a composition (family + primitive names,
constants left out) is in `heldout` or in `train` by a fixed hash, for every seed; only level 2-3 compositions are
held out, so every primitive appears in train. Asserts are computed from plain Python functions of the spec and
chosen to catch every applicable bug kind and every dropped operation.

What it simplifies: statements are templated (learnable by a tiny model), the function is always `f`, inputs are
small ints and short strings. Generation runs our own code only, no `exec`.

    from codechat.tasks.synthetic import generate_tasks, sft_examples
    train = generate_tasks("train", 400, seed=0)          # = load_tasks("builtin:synthetic-train")
    pairs = sft_examples(train, buggy_fraction=0.3, seed=0)
"""
from codechat.tasks.synthetic.generate import SPLITS, compositions, generate_tasks, make_task, split_of
from codechat.tasks.synthetic.primitives import RARE_PRIMITIVES
from codechat.tasks.synthetic.render import STYLES, code, statement
from codechat.tasks.synthetic.sft import buggy_solution, sft_examples, sft_records
from codechat.tasks.synthetic.spec import BUG_KINDS, composition, evaluate, level, with_bug

TRAIN_SIZE, HELDOUT_SIZE, SEED = 400, 100, 0
"""Sizes and seed of the registered sets `builtin:synthetic-train` and `builtin:synthetic-heldout`."""

__all__ = ["BUG_KINDS", "HELDOUT_SIZE", "RARE_PRIMITIVES", "SEED", "SPLITS", "STYLES", "TRAIN_SIZE",
           "buggy_solution", "code", "composition", "compositions", "evaluate", "generate_tasks", "level",
           "make_task", "sft_examples", "sft_records", "split_of", "statement", "with_bug"]
