"""The import graph of the tree (issue #31, docs/ARCHITECTURE.md): no circle, and no arrow back up.

The layers, lowest first: ``fedsel_env`` < ``agents`` < ``fedsel_eval`` and ``fedsel_flower`` < the scripts
``train_agent.py`` and ``evaluate.py`` < ``experiments/`` and ``bench/`` (which do not import each other).
Every import counts, a function's lazy one included; imports under ``if TYPE_CHECKING:`` (annotations only,
never run) do not. ``from package import name`` is an arrow to the submodule ``name`` when there is one,
else to the package (its ``__init__``).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedsel_env", "agents", "fedsel_eval", "fedsel_flower", "experiments", "bench", "examples")
#: a module's layer: its top-level name's
LAYERS = {"fedsel_env": 0, "agents": 1, "fedsel_eval": 2, "fedsel_flower": 2, "train_agent": 3, "evaluate": 3,
          "experiments": 4, "bench": 4, "examples": 4}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def tree_modules() -> Dict[str, Path]:
    """Every module of the tree by its dotted name (the root's scripts and the packages above)."""
    files = [p for p in ROOT.glob("*.py")] + [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return {module_name(p): p for p in files}


def _without_type_checking(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        for name in ("body", "orelse"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                setattr(node, name, [n for n in block
                                     if not (isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))])
    return tree


def imported(path: Path, modules: Dict[str, Path], name: str = "") -> Iterator[str]:
    """The names the module ``name`` (the file ``path``) imports, relative imports resolved (``from . import x``:
    the submodule ``x``)."""
    tree = _without_type_checking(ast.parse(path.read_text()))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            if len(subs) < len(node.names):
                yield base
            yield from subs


def import_graph() -> Dict[str, Set[str]]:
    """module → the modules of the tree it imports (an import of ``a.b.c`` is an arrow to the nearest module)."""
    modules = tree_modules()
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        graph[name] = set()
        for target in imported(path, modules, name):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_import_graph_has_no_circle():
    found = circles(import_graph())
    assert not found, f"import circles (break each with a module below both): {found}"


#: arrows up that are known and owed a fix (each names its issue); the test fails when one is gone, so the
#: list only shrinks
KNOWN_UP: set = set()


def arrows_up():
    up = set()
    for source, targets in sorted(import_graph().items()):
        top = source.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if LAYERS[other] > LAYERS[top] or (LAYERS[top] == LAYERS[other] == 4 and other != top):
                up.add(f"{source} -> {target}")
    return up


def test_no_arrow_goes_back_up():
    up = arrows_up()
    assert not up - KNOWN_UP, f"imports of a higher layer (or between experiments/ and bench/): {sorted(up - KNOWN_UP)}"
    assert not KNOWN_UP - up, f"fixed: take {sorted(KNOWN_UP - up)} off KNOWN_UP in tests/test_architecture.py"


def test_the_deployment_table_sits_below_training_and_evaluation():
    graph = import_graph()
    bad = sorted(t for t in graph["agents.deploy"] if t.startswith(("agents.training", "fedsel_eval", "fedsel_flower")))
    assert not bad, f"agents/deploy.py imports {bad}: it is read by agents.training and fedsel_eval, never the reverse"


def test_the_checker_sees_a_circle_and_a_lazy_import(tmp_path):
    """The checker itself: a circle through a function's import is found; a TYPE_CHECKING one is not."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
                 "def f():\n    import y\n    from . import z, w\n")
    assert sorted(imported(f, {"p.z": f}, "p.m")) == ["p", "p.z", "typing", "y"]


def test_the_benchs_copy_of_an_experiments_config_stays_the_experiments():
    """bench/linear_fast_path.py times a run of experiments/qffl_synthetic.py; bench/ does not import
    experiments/, so it writes the config out: the two must not drift apart."""
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.linear_fast_path import QFFL_PAPER
    from experiments.qffl_synthetic import PAPER

    assert QFFL_PAPER == PAPER
