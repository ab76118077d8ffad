"""Hostile configs (issue #30): alias bombs, deep nesting, huge integers, presets inside overrides, plug-in
paths that miss their interface or exit on import, a plug-in aggregator's wrong answer, ``ulimit -v``.

Each is a ``ValueError`` naming the field (or the plug-in), in well under a second, never a hang, a
``RecursionError``, a bare ``TypeError`` or a silent exit.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import fedsel_env  # noqa: F401  (registers the env ids)
from fedsel_env.config import load_config, make_config, parse_yaml
from fedsel_env.sim.aggregators import AGGREGATORS
from fedsel_env.sim.limits import memory_budget

ROOT = Path(__file__).resolve().parents[1]


def alias_bomb(key: str, levels: int = 9) -> str:
    """A YAML document of ~400 bytes whose ``key`` expands to 9**levels strings."""
    lines = ['l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{key}: *l{levels - 1}\n"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _refused(fn, match: str) -> str:
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match) as err:
        fn()
    assert time.perf_counter() - start < 1.0
    assert len(str(err.value)) < 2000, len(str(err.value))
    return str(err.value)


@pytest.mark.parametrize("field", ["flat_parts", "system", "adversary"])
def test_an_alias_bomb_is_refused_at_once_naming_the_field(tmp_path, field):
    body = {"flat_parts": "flat_parts: *l8", "system": "system: {availability: *l8}",
            "adversary": "adversary: {attackers: *l8}"}[field]
    text = alias_bomb("bomb").replace("bomb: *l8", body)
    path = tmp_path / "bomb.yml"
    path.write_text(text)
    assert len(text) < 500
    _refused(lambda: make_config(load_config(path)), rf"'l\d'|{field}")
    # the same value through an override (evaluate.py --env-kwargs / train_agent.py --env-kwargs)
    from fedsel_eval.params import parse_params

    inline = "[" + ",".join(["[" + ",".join(["x"] * 9) + "]"] * 9) + "]"
    assert parse_params([f"flat_parts={inline}"], "--env-kwargs")  # small: fine
    bomb_cfg = {field: None}
    a = ["x"] * 9
    for _ in range(8):
        a = [a] * 9  # 9**9 items, shared: what YAML aliases build
    bomb_cfg[field] = a if field == "flat_parts" else {"availability" if field == "system" else "attackers": a}
    _refused(lambda: make_config(bomb_cfg), f"'{field}(\\.\\w+)?' expands to more than")


def test_deep_nesting_is_a_value_error_not_a_recursion_error(tmp_path):
    from fedsel_eval.params import parse_params

    _refused(lambda: parse_params([f"flat_parts={nested(3000)}"], "--env-kwargs"), "flat_parts.*nested more than")
    (tmp_path / "deep.yml").write_text(f"model_params: {{hidden: {nested(3000)}}}\n")
    _refused(lambda: load_config(tmp_path / "deep.yml"), r"deep\.yml.*'model_params(\.hidden)?' is nested more than.*line 1")
    deep: list = []
    inner = deep
    for _ in range(3000):
        inner.append([])
        inner = inner[0]
    _refused(lambda: make_config({"model_params": {"hidden": deep}}), r"'model_params\.hidden' is nested more than")


def test_a_huge_integer_names_the_field(tmp_path):
    _refused(lambda: make_config({"num_clients": 10**5000}), r"'num_clients' = <an integer of about 5,001 digits>")
    _refused(lambda: make_config({"reward_params": {"xi": -(10**5000)}}), r"'reward_params\.xi'")
    (tmp_path / "big.yml").write_text("num_clients: " + "7" * 5000 + "\n")
    _refused(lambda: load_config(tmp_path / "big.yml"), r"'num_clients' = <an integer of 5,000 digits>")
    _refused(lambda: make_config({"flat_parts": ["weights"] * 100_000}), r"'flat_parts' = \['weights'")


def test_preset_inside_overrides_is_applied_alone_and_refused_against_another():
    assert make_config({"preset": "tiny"}) == make_config(preset="tiny")  # applied when it is the only one
    assert make_config({"preset": "tiny"}, preset="tiny") == make_config(preset="tiny")
    _refused(lambda: make_config({"preset": "default"}, preset="tiny"), r"'preset' = 'default' .* contradicts .*'tiny'")
    _refused(lambda: gym.make("fedsel/FedSelect-Tiny-v0", config={"preset": "default"}), "contradicts")
    from fedsel_env.config import resolve_env

    preset, overrides = resolve_env("tiny")
    overrides["preset"] = "default"  # --env tiny --env-kwargs preset=default
    _refused(lambda: make_config(overrides, preset), "contradicts")


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "bad_aggs.py").write_text(
        "import torch\nfrom fedsel_env.sim.aggregators import Aggregator\n"
        "class WrongShape(Aggregator):\n    def aggregate(self, u):\n        return u.global_params[:3]\n"
        "class WrongDtype(Aggregator):\n    def aggregate(self, u):\n        return u.global_params.to(torch.int64)\n"
        "class NoTensor(Aggregator):\n    def aggregate(self, u):\n        return u.global_params.tolist()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("field", ["model", "dataset", "partition"])
def test_plugin_paths_are_checked_against_their_interface(field, plugin_dir):
    tiny = {"num_clients": 4, "clients_per_round": 2, "max_rounds": 1}
    for path in ("os:system", "os:sep", "json:loads"):
        msg = _refused(lambda: gym.make("fedsel/FedSelect-Tiny-v0", config={**tiny, field: path}).reset(seed=0),
                       f"{field} '{path}' does not fit")
        assert "TypeError" not in msg
    _refused(lambda: gym.make("fedsel/FedSelect-Tiny-v0", config={**tiny, field: "exits_on_import:x"}),
             r"exits_on_import.*sys\.exit\(3\)")


@pytest.mark.parametrize("cls, problem", [("WrongShape", r"a tensor of shape \(3,\)"), ("WrongDtype", "a tensor of dtype torch.int64"),
                                          ("NoTensor", "a list, not a torch.Tensor")])
def test_a_plugin_aggregators_wrong_answer_names_it(cls, problem, plugin_dir):
    env = gym.make("fedsel/FedSelect-Tiny-v0", config={"aggregator": f"bad_aggs:{cls}"})
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    with pytest.raises(ValueError, match=rf"aggregator bad_aggs:{cls} returned {problem}"):
        env.step(env.action_space.sample())


def test_memory_guard_honours_ulimit_v():
    """Under ``ulimit -v`` (RLIMIT_AS) the budget is what the limit leaves, and a config too big for it (an MLP
    of 100,000 hidden units: FAVOR's PCA over the profiling round's models) is refused before the SVD."""
    code = (
        "import resource, gymnasium as gym, fedsel_env\n"
        "from fedsel_env.sim.limits import memory_budget\n"
        "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))\n"
        "print('budget', memory_budget())\n"
        "try:\n"
        "    gym.make('fedsel/FedSelect-v0', config={'model_params': {'hidden': 100000}})\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    budget = int(out.stdout.split("budget ")[1].split()[0])
    assert budget < 6 << 30 < memory_budget()
    assert "refused:" in out.stdout and "'model_params'" in out.stdout and "PCA" in out.stdout, out.stdout


def test_fuzz_of_hostile_configs_gives_only_value_errors_naming_the_field():
    """The small version of ``bench/fuzz_configs.py`` (1,200 configs there): 150 alias bombs, deep nestings,
    huge integers, hostile plug-in paths, over-long texts and bad single values (issue #44: 401-digit numbers,
    NaN, -0.0, bools, arrays where a name is expected), as YAML files, KEY=VALUE values and dicts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_configs", ROOT / "bench" / "fuzz_configs.py")
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    report = fuzz.fuzz(150, seed=7, limit=1.0)
    assert not report["failures"], report["failures"][:5]
    assert all(f["count"] == 150 // len(fuzz.FAMILIES) for f in report["families"].values())
