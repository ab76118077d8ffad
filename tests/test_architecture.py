"""The import graph of the tree (issue #31, docs/ARCHITECTURE.md): no circle, and no arrow back up.

The layers, lowest first: ``fedsel_env`` < ``agents`` < ``fedsel_eval`` and ``fedsel_flower`` < the scripts
``train_agent.py`` and ``evaluate.py`` < ``experiments/`` and ``bench/`` (which do not import each other).
Every import counts, a function's lazy one included; imports under ``if TYPE_CHECKING:`` (annotations only,
never run) do not. ``from package import name`` is an arrow to the submodule ``name`` when there is one,
else to the package (its ``__init__``).

An import by string is an arrow too (issue #46): ``importlib.import_module("a.b")``, ``__import__("a.b")``,
``import_module(f"a.{x}")`` (an arrow to what the f-string's fixed head names), and any other string that names a
module of the tree, alone or as an import path ``a.b:Name`` (what ``fedsel_env.registry.load_import_path`` and
``agents.deploy``'s table import), outside docstrings. And the library (``fedsel_env``, ``agents``,
``fedsel_eval``, ``fedsel_flower``) reads nothing under ``experiments/``: no path literal of the library has
``experiments`` as one of its parts (an installed wheel has no such folder; the bench's reference record is
package data, ``fedsel_eval/data/``).
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

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


#: the calls that import the module their first argument names
IMPORT_CALLS = {"import_module", "__import__", "load_import_path", "find_spec"}
#: keywords whose string is Gymnasium's entry point of a registered env id (loaded by ``gym.make``, the way
#: Gymnasium registers environments), not an import of this module's
GYM_ENTRY_POINTS = {"entry_point", "vector_entry_point"}
#: a string that may name a module: dotted names, optionally ``:Attr`` (an import path)
MODULE_STRING = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_][\w.]*)?$")


def _docstrings(tree: ast.AST) -> Set[int]:
    """The ids of the docstring nodes of a module, its classes and functions (prose, not code)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def string_imports(path: Path, modules: Dict[str, Path]) -> Iterator[str]:
    """The modules of the tree the file ``path`` names by string (see the module's docstring): the first argument
    of an import call (an f-string: its fixed head, up to the last whole name), and every other string, docstrings
    left out, that is a module's dotted name of the tree or an import path ``module:Name`` into it (Gymnasium's
    ``entry_point=`` of a registered env id excepted)."""
    tree = _without_type_checking(ast.parse(path.read_text()))
    docs = _docstrings(tree)
    in_calls: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):  # Gymnasium's register(entry_point=...): gym.make's lazy contract
            in_calls |= {id(k.value) for k in node.keywords if k.arg in GYM_ENTRY_POINTS}
        if isinstance(node, ast.Call) and _call_name(node) in IMPORT_CALLS and node.args:
            arg = node.args[0]
            in_calls.add(id(arg))
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value.split(":")[0]
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                head = str(arg.values[0].value).split(":")[0]
                head = head.rpartition(".")[0] if not head.endswith(".") else head.rstrip(".")
                if head:
                    yield head
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs | in_calls \
                and MODULE_STRING.match(node.value):
            name = node.value.split(":")[0]
            if ("." in name or ":" in node.value) and name in modules:  # a bare word ("agents") is no module here
                yield name


#: the library: what an installed wheel holds (pyproject.toml's packages), which reads nothing of experiments/
LIBRARY = ("fedsel_env", "agents", "fedsel_eval", "fedsel_flower")
#: a path literal with ``experiments`` as one of its parts (no white space: a path, not a sentence naming a script)
EXPERIMENTS_PATH = re.compile(r"^(?:[^\s]*/)?experiments(?:/[^\s]*)?$")


def experiments_paths(path: Path) -> List[Tuple[int, str]]:
    """(line, text) of every string of ``path``, docstrings left out, that is a path into ``experiments/`` (an
    f-string: any fixed part that is)."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and EXPERIMENTS_PATH.match(node.value):
            found.append((node.lineno, node.value))
    return found


@functools.lru_cache(maxsize=None)  # one parse of the tree per test session (the tests only read it)
def import_graph(by_string: bool = True) -> Dict[str, Set[str]]:
    """module → the modules of the tree it imports (an import of ``a.b.c`` is an arrow to the nearest module),
    by statement and (``by_string``) by string."""
    modules = tree_modules()
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        graph[name] = set()
        targets = list(imported(path, modules, name))
        if by_string:
            targets += [t for t in string_imports(path, modules) if t.split(".")[0] in LAYERS]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a name of its own package
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
    # issue #46: the agent modules register their algorithms and deployments; the table names none of them
    readers = sorted(t for t in graph["agents.deploy"] if "agents.deploy" in graph.get(t, ()))
    assert not readers, f"agents/deploy.py names {readers} (by import or by string) while they import it: let " \
                        f"them register_algorithm / register_deployment themselves"


def test_the_plan_sits_below_the_run_folder():
    """Issue #46: ``fedsel_eval.plan`` (what to play) does not import ``fedsel_eval.run_folder`` (where the results
    go), which reads the plan: one direction, not a loop hidden behind ``TYPE_CHECKING``."""
    assert "fedsel_eval.run_folder" not in import_graph()["fedsel_eval.plan"]


#: library files that still hold a path into experiments/, each owed a fix (the test fails when one is gone, so
#: the list only shrinks)
KNOWN_EXPERIMENTS_PATHS: set = set()


def test_the_library_reads_nothing_under_experiments():
    """An installed fedsel has no experiments/ folder: the library names no path into it (issue #46: the bench's
    reference record was read from experiments/results/ at run time, and quietly empty in a wheel)."""
    found = {}
    for name, path in sorted(tree_modules().items()):
        if name.split(".")[0] in LIBRARY:
            hits = experiments_paths(path)
            if hits:
                found[path.relative_to(ROOT).as_posix()] = hits
    assert not set(found) - KNOWN_EXPERIMENTS_PATHS, \
        f"the library reads experiments/ (ship the file as package data, or pass it in): " \
        f"{ {k: v for k, v in found.items() if k not in KNOWN_EXPERIMENTS_PATHS} }"
    assert not KNOWN_EXPERIMENTS_PATHS - set(found), \
        f"fixed: take {sorted(KNOWN_EXPERIMENTS_PATHS - set(found))} off KNOWN_EXPERIMENTS_PATHS"


def test_the_checker_sees_imports_by_string_and_paths_into_experiments(tmp_path):
    """The checker itself: every way of naming a module by string is an arrow, prose is not; a path into
    experiments/ is found, a sentence naming a script is not."""
    f = tmp_path / "m.py"
    f.write_text('''"""Docstring naming agents.favor:DoubleDQN and fedsel_eval.bench."""
import importlib
from importlib import import_module
from gymnasium import register

def f(name):
    importlib.import_module("fedsel_eval.bench")
    __import__("experiments.common")
    import_module(f"fedsel_eval.{name}")
    register(id="x-v0", entry_point="fedsel_env.env:FedSelectEnv")
    table = ("agents.favor:DoubleDQN", "agents.per_client_net")
    words = ("agents", "bench:quickstart", "a sentence about agents.favor")
    where = Path(__file__).parents[1] / "experiments" / "results"
    also = "../experiments/results/x.json"
    raise ValueError("run experiments/bench_reference.py first")
''')
    modules = {m: f for m in ("fedsel_eval", "fedsel_eval.bench", "experiments.common", "agents.favor",
                              "agents.per_client_net", "fedsel_env.env", "agents")}
    assert sorted(string_imports(f, modules)) == ["agents.favor", "agents.per_client_net", "experiments.common",
                                                  "fedsel_eval", "fedsel_eval.bench"]
    assert sorted(text for _line, text in experiments_paths(f)) == ["../experiments/results/x.json", "experiments"]
    # a module that names by string one that imports it is a circle (agents/deploy.py's table before #46)
    assert circles({"agents.deploy": {"agents.favor"}, "agents.favor": {"agents.deploy"}}) == \
        [["agents.deploy", "agents.favor"]]


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
