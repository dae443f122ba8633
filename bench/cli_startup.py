"""Start-up time of `codechat --help` with the command modules' lazy imports, against the same with them eager.

    python bench/cli_startup.py [--reps 3]

The command modules (codechat/commands/*.py) import most of codechat inside run(). This measures what moving
those imports to the top would cost every CLI call, `--help` included, in the same run and alternating:
  lazy        `python -m codechat --help` as it is
  eager       the same after importing every module a command imports inside a function (found from the
              source with ast), which is what `codechat --help` would load if they were at the top
  eager_light the same with only those that pull in neither torch nor matplotlib
Each figure is the median wall time of --reps fresh processes. Ends with one JSON line:
{"lazy_s", "eager_s", "eager_light_s", "eager_over_lazy", "eager_light_over_lazy", "heavy", "light"}.
"""
import argparse
import ast
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
args = ap.parse_args()


def lazy_imports() -> list[str]:
    """Modules the command modules import inside functions."""
    mods = set()
    for path in sorted((ROOT / "codechat" / "commands").glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                mods |= {n.module for n in ast.walk(fn) if isinstance(n, ast.ImportFrom)
                         and (n.module or "").startswith("codechat")}
    return sorted(mods)


def module_file(mod: str) -> Path | None:
    base = ROOT / Path(*mod.split("."))
    return base / "__init__.py" if (base / "__init__.py").is_file() else base.with_suffix(".py") \
        if base.with_suffix(".py").is_file() else None


def top_level_imports(mod: str) -> set[str]:
    """Modules `mod` imports when it is imported: its packages' __init__ and its module-level imports."""
    parts = mod.split(".")
    out = {".".join(parts[:i]) for i in range(1, len(parts))}
    path = module_file(mod)
    if path is None:
        return out
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    nodes += [n for b in tree.body if isinstance(b, (ast.If, ast.Try)) and not _type_checking(b)
              for n in ast.walk(b) if isinstance(n, (ast.Import, ast.ImportFrom))]
    for n in nodes:
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif n.module and n.level == 0:
            out.add(n.module)
            out |= {f"{n.module}.{a.name}" for a in n.names if module_file(f"{n.module}.{a.name}")}
    return out


def _type_checking(node) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def pulls_heavy(mod: str, seen: set[str] | None = None) -> bool:
    """Whether importing `mod` imports torch or matplotlib (from the source: module-level imports only)."""
    seen = set() if seen is None else seen
    if mod in seen:
        return False
    seen.add(mod)
    if mod.split(".")[0] in ("torch", "matplotlib"):
        return True
    if mod.split(".")[0] != "codechat":
        return False
    return any(pulls_heavy(m, seen) for m in top_level_imports(mod))


def wall(pre: list[str]) -> float:
    code = "".join(f"import {m}\n" for m in pre) + "from codechat.cli import main\nmain(['--help'])\n"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True)
    return time.perf_counter() - t


mods = lazy_imports()
heavy = [m for m in mods if pulls_heavy(m)]
light = [m for m in mods if m not in heavy]
runs = {"lazy": [], "eager": [], "eager_light": []}
for _ in range(args.reps):  # alternating, so a change in machine load hits all three alike
    runs["lazy"].append(wall([]))
    runs["eager"].append(wall(mods))
    runs["eager_light"].append(wall(light))
med = {k: statistics.median(v) for k, v in runs.items()}
for k, v in runs.items():
    print(f"{k:12s} median {med[k]:.2f} s  ({', '.join(f'{x:.2f}' for x in v)})")
print(json.dumps({"lazy_s": round(med["lazy"], 3), "eager_s": round(med["eager"], 3),
                  "eager_light_s": round(med["eager_light"], 3),
                  "eager_over_lazy": round(med["eager"] / med["lazy"], 2),
                  "eager_light_over_lazy": round(med["eager_light"] / med["lazy"], 2),
                  "heavy": heavy, "light": light}))
