"""The layers stay layers (issue #14, docs/ARCHITECTURE.md): imports only go down, rooms stay small."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("fedsel_env", "agents", "fedsel_eval", "fedsel_flower")


def imported_modules(path: Path):
    """Every module a file imports (absolute names; relative imports resolved against its package)."""
    tree = ast.parse(path.read_text())
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                yield ".".join(base + ((node.module,) if node.module else ()))
            else:
                yield node.module


def files(package: str):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", files("fedsel_env"), ids=lambda p: str(p.relative_to(ROOT)))
def test_env_package_imports_nothing_above_it(path):
    above = [m for m in imported_modules(path) if m.split(".")[0] in ("agents", "fedsel_eval", "fedsel_flower")]
    assert not above, f"{path.relative_to(ROOT)} imports {above}: fedsel_env must not know the layers above it"


@pytest.mark.parametrize("path", files("fedsel_env/sim"), ids=lambda p: str(p.relative_to(ROOT)))
def test_simulator_knows_nothing_of_gymnasium_or_the_env(path):
    env_level = ("fedsel_env.env", "fedsel_env.server_view", "fedsel_env.actions", "fedsel_env.rewards",
                 "fedsel_env.episode_info")
    bad = [m for m in imported_modules(path) if m.split(".")[0] == "gymnasium" or m.startswith(env_level)]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: the simulator sits below the env"


def test_library_files_stay_small():
    big = {str(p.relative_to(ROOT)): n for pkg in LIBRARY for p in files(pkg)
           if (n := len(p.read_text().splitlines())) > 500}
    assert not big, f"library files over 500 lines (split them by what they own): {big}"
    assert len((ROOT / "fedsel_env" / "env.py").read_text().splitlines()) < 200
