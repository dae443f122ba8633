"""The package's shape: few top-level modules, no module-level import circle, and config never importing the
code it configures (the data flow reads task -> rollout -> verify -> reward -> advantage -> loss -> update)."""
import ast
from pathlib import Path

import codechat

ROOT = Path(codechat.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.parse(path.read_text()).body:  # module level only: lazy imports inside functions are fine
            nodes = [node] + (list(ast.walk(node)) if isinstance(node, (ast.If, ast.Try)) else [])
            for n in nodes:
                if isinstance(n, ast.Import):
                    deps |= {a.name for a in n.names if a.name in mods}
                elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0 and n.module in mods:
                    subs = {f"{n.module}.{a.name}" for a in n.names} & mods.keys()
                    deps |= subs if subs else {n.module}
                    if len(subs) < len(n.names):
                        deps.add(n.module)
        graph[name] = deps - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_top_level_holds_at_most_eight_modules():
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= 8, top


def test_no_module_level_import_circle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_config_imports_nothing_it_configures():
    above = ("codechat.train", "codechat.demos", "codechat.commands", "codechat.cli")
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("codechat.config"):
            assert not [d for d in deps if d.startswith(above)], (name, deps)


def test_every_help_example_parses():
    import shlex

    from codechat.cli import TOUR, build_parser
    from codechat.commands import COMMANDS

    lines = list(TOUR) + [line for cmd in COMMANDS.values() for line in cmd.examples]
    assert all(cmd.examples for cmd in COMMANDS.values())
    for line in lines:
        argv = shlex.split(line)[1:]
        build_parser(argv).parse_args(argv)  # argparse exits on an unknown flag or a missing argument
