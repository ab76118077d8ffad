"""Agents, aggregators, rewards and algorithms from outside the repository, named by import path
``package.module:Class`` (issue #16, part 3): one mechanism in ``fedsel_env.registry.Registry.lookup``, so
the env config, ``agents.make``, ``evaluate.py`` and ``train_agent.py`` all take them."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import agents
from fedsel_env.env import FedSelectEnv
from fedsel_env.registry import Registry
from fedsel_env.sim.aggregators import AGGREGATORS

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
import evaluate  # noqa: E402

torch.set_num_threads(1)

PLUGINS = textwrap.dedent('''
    """A user's own module, outside the repository."""
    from stable_baselines3 import PPO

    from agents import SelectionAgent
    from fedsel_env.sim.aggregators import Aggregator


    class LowestIds(SelectionAgent):
        """The K available clients with the lowest ids, from `skip` on."""
        name = "lowest_ids"

        def __init__(self, spec, seed=None, skip=0):
            super().__init__(spec, seed)
            self.skip = skip

        def select(self, obs):
            return self.available(obs)[self.skip:][: self.k]


    class Median(Aggregator):
        """The coordinate-wise median of the responders' models."""
        name = "median"

        def aggregate(self, updates):
            return updates.local_params.median(dim=0).values


    class ConstantReward:
        def __init__(self, value=-1.0):
            self.value = value

        def __call__(self, outcome):
            return self.value


    class MyPPO(PPO):
        """A user's own algorithm class."""


    def wide_net(input_shape, num_classes, hidden=16):
        import numpy as np
        from torch import nn
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), hidden), nn.ReLU(),
                             nn.Linear(hidden, num_classes))


    def in_order(labels, sizes, num_classes, rng):
        """Client k gets the next sizes[k] samples of a shuffled pool."""
        import numpy as np
        order, ends = rng.permutation(len(labels)), np.cumsum(sizes)
        return [order[end - size:end] for size, end in zip(sizes, ends)]


    class NoSelect:
        """Not an agent: no predict."""


    def not_a_class():
        return None
''')


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The module ``fedsel_user_plugins`` in a folder on sys.path."""
    (tmp_path / "fedsel_user_plugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fedsel_user_plugins", raising=False)
    yield "fedsel_user_plugins"
    sys.modules.pop("fedsel_user_plugins", None)


def test_env_config_names_aggregator_and_reward_by_import_path(plugins):
    env = FedSelectEnv(preset="tiny", config={"aggregator": f"{plugins}:Median",
                                              "reward": f"{plugins}:ConstantReward", "reward_params": {"value": -2}})
    agent = agents.make(f"{plugins}:LowestIds", env.selection_spec, seed=0, skip=1)
    obs, _ = env.reset(seed=0)
    action, _ = agent.predict(obs)
    available = np.flatnonzero(env.action_masks())
    _, reward, _, _, info = env.step(action)
    assert reward == -2.0
    assert sorted(info["selected"]) == sorted(available[1:4])
    assert type(env.federation.aggregator).__name__ == "Median"
    assert f"{plugins}:LowestIds" not in agents.AGENTS  # looked up, not registered: listings stay the package's


def test_env_config_names_model_and_partition_by_import_path(plugins):
    env = FedSelectEnv(preset="tiny", config={"model": f"{plugins}:wide_net", "model_params": {"hidden": 8},
                                              "partition": f"{plugins}:in_order", "partition_params": {}})
    assert env.model_size == 64 * 8 + 8 + 8 * 10 + 10  # digits: 8x8 inputs, 10 classes
    env.reset(seed=0)
    env.step(env.action_space.sample())
    with pytest.raises(ValueError, match="unknown model parameter.*'hiden'.*allowed: \\['hidden'\\]"):
        FedSelectEnv(preset="tiny", config={"model": f"{plugins}:wide_net", "model_params": {"hiden": 8}})


def test_evaluate_takes_plugin_policies_and_backends(plugins, tmp_path):
    out = evaluate.main(["--env", "tiny", "--rounds", "2", "--seeds", "0", "--no-plots", "--no-progress",
                         "--policy", "random", "--policy", f"{plugins}:LowestIds:skip=1", "--policy",
                         f"low={plugins}:LowestIds", "--aggregator", "fedavg", "--aggregator", f"{plugins}:Median",
                         "--out", str(tmp_path / "run")])
    config = json.loads((out / "config.json").read_text())
    assert [p["label"] for p in config["policies"]] == ["random", f"{plugins}:LowestIds(skip=1)", "low"]
    assert config["policies"][1]["params"] == {"skip": 1}
    assert [b["name"] for b in config["backends"]] == ["fedavg", f"{plugins}:Median"]
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 6


def test_train_agent_takes_an_algorithm_class_by_import_path(plugins, tmp_path):
    run = _train_agent().main(["--algo", f"{plugins}:MyPPO", "--env", "tiny", "--env-kwargs", "observation=flat",
                                    "--n-timesteps", "32", "--hyperparams", "n_steps=16", "batch_size=16",
                                    "--runs-dir", str(tmp_path), "--eval-freq", "0", "--save-freq", "0",
                                    "--no-progress-bar", "--verbose", "0"])
    assert run.name == "MyPPO_tiny_seed0" and (run / "model.zip").is_file()
    out = evaluate.main(["--env", "tiny", "--rounds", "2", "--seeds", "0", "--no-plots", "--no-progress",
                         "--policy", str(run), "--out", str(tmp_path / "eval")])
    assert json.loads((out / "config.json").read_text())["policies"][0]["algo"] == f"{plugins}:MyPPO"


def _train_agent():
    """The train_agent.py script as a module (loaded once per session)."""
    import importlib.util

    if "train_agent" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_agent", REPO / "train_agent.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["train_agent"] = module
        spec.loader.exec_module(module)
    return sys.modules["train_agent"]


@pytest.mark.parametrize("name,match", [
    ("no_such_package.agents:Greedy", "no module named 'no_such_package'; install the package"),
    ("{m}:Greedy", "has no attribute 'Greedy'; it defines .*'LowestIds'"),
    ("{m}:NoSelect", "does not fit: class .*NoSelect lacks \\['predict'\\]; subclass agents.SelectionAgent"),
    ("{m}:not_a_class", "does not fit: expected a class"),
])
def test_bad_agent_paths_say_what_is_wrong(plugins, name, match):
    spec = FedSelectEnv(preset="tiny").selection_spec
    with pytest.raises(ValueError, match=match):
        agents.make(name.format(m=plugins), spec)


def test_bad_aggregator_and_reward_classes_are_refused_at_construction(plugins):
    with pytest.raises(ValueError, match="aggregator .*LowestIds' does not fit: .*lacks \\['aggregate', "
                                         "'local_options'\\]; subclass fedsel_env.sim.aggregators.Aggregator"):
        FedSelectEnv(preset="tiny", config={"aggregator": f"{plugins}:LowestIds"})
    with pytest.raises(ValueError, match="reward .*NoSelect' does not fit: .*lacks \\['__call__'\\]"):
        FedSelectEnv(preset="tiny", config={"reward": f"{plugins}:NoSelect"})
    with pytest.raises(ValueError, match="not a Stable-Baselines3 algorithm class"):
        from agents.training.algorithms import check_algo
        check_algo(f"{plugins}:LowestIds")


def test_split_reads_parameters_after_a_name_or_an_import_path():
    assert AGGREGATORS.split("qfedavg:q=1") == ("qfedavg", "q=1")
    assert AGGREGATORS.split("my_pkg.aggs:Median") == ("my_pkg.aggs:Median", "")
    assert AGGREGATORS.split("my_pkg.aggs:Median:k=2,b=[1, 2]") == ("my_pkg.aggs:Median", "k=2,b=[1, 2]")
    fixed = Registry("action mode", plugins=False)
    with pytest.raises(ValueError, match="unknown action mode 'a.b:C'; registered action modes: \\[\\]$"):
        fixed.lookup("a.b:C")
