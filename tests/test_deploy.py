"""agents/deploy.py (issue #31): one table says how each trained algorithm is trained, loaded, told from a
bare zip and deployed; adding an algorithm is one entry (and its hyper-parameter file).

A toy algorithm is registered here — SB3's DQN under another name, deployed as FAVOR's top-K of Q-values —
trained by ``train_agent.py`` from a hyper-parameter file of its own, then evaluated by ``evaluate.py`` and
chosen by the Flower strategy (``FedSelectStrategy(model=...)``) with no other edit.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from agents.deploy import (ALGORITHMS, DEPLOYMENTS, Algorithm, ModelPolicy, algorithm, deploy, detect_algorithm,
                           model_class, register_algorithm)
from agents.favor import FavorAgent
from agents.per_client import PerClientAgent
from fedsel_env.env import FedSelectEnv

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # train_agent.py and evaluate.py are scripts at the repository root
    sys.path.insert(0, str(REPO))

TOY = "toy_dqn"
TOY_CONF = """default:
  n_timesteps: 24
  policy: MlpPolicy
  learning_starts: 8
  buffer_size: 200
  batch_size: 8
  policy_kwargs: "dict(net_arch=[16])"
  env_kwargs: {action_mode: one, observation: flat, pca_components: 3}
"""


@pytest.fixture
def toy():
    """The toy entry, registered for one test."""
    entry = register_algorithm(Algorithm(TOY, "stable_baselines3:DQN", ("one",), True, "top_k",
                                         about="a toy: SB3's DQN under another name, deployed as top-K"))
    yield entry
    ALGORITHMS.pop(TOY)


def test_the_table_holds_every_algorithm_and_how_it_is_deployed():
    assert {a.deploy for a in ALGORITHMS.values()} <= set(DEPLOYMENTS) == {"top_k", "per_client", "policy"}
    for name, deployed in {"favor": "top_k", "favor+": "top_k", "dqn": "top_k", "pc_dqn": "per_client",
                           "pc_ppo": "per_client", "ppo": "policy", "sac": "policy", "maskable_ppo": "policy"}.items():
        assert algorithm(name).deploy == deployed
        assert model_class(name).__name__ in ("DoubleDQN", "DQN", "PPO", "SAC", "MaskablePPO")
    assert algorithm("stable_baselines3:A2C").deploy == "policy"  # an import path: acts as trained
    with pytest.raises(ValueError, match="registered already"):
        register_algorithm(Algorithm("favor", "stable_baselines3:DQN"))
    with pytest.raises(ValueError, match="action modes"):
        register_algorithm(Algorithm("bad", "stable_baselines3:DQN", ("two",)))


@pytest.mark.slow
def test_a_registered_algorithm_trains_and_deploys_through_evaluate_and_flower(toy, tmp_path):
    import evaluate
    import train_agent

    conf = tmp_path / f"{TOY}.yml"  # configs/<algo>.yml for an algorithm of the repository
    conf.write_text(TOY_CONF)
    run = train_agent.main(["--algo", TOY, "--env", "tiny", "--conf-file", str(conf), "-f", str(tmp_path),
                            "--name", "toy", "--eval-freq", "0", "--save-freq", "0", "--no-progress-bar",
                            "--verbose", "0"])
    assert detect_algorithm(run / "model.zip") == "favor"  # a bare zip's DQN policy: deployed alike

    out = evaluate.main(["--env", "tiny", "--policy", str(run), "--policy", "random", "--seeds", "0",
                         "--rounds", "2", "--out", str(tmp_path / "eval"), "--no-plots", "--no-progress"])
    config = json.loads((out / "config.json").read_text())
    assert [p.get("algo") for p in config["policies"]] == [TOY, None]
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["policy"] for r in lines) == ["random", f"{TOY}:toy"]

    env = FedSelectEnv(config={"preset": "tiny", "pca_components": 3})
    obs, _ = env.reset(seed=0)
    agent = deploy(run, env.selection_spec, seed=0)
    assert isinstance(agent, FavorAgent)  # the entry's deployment: FAVOR's top-K of Q-values

    pytest.importorskip("flwr", reason="the optional extra 'flower' is not installed")
    from fedsel_flower import FedSelectStrategy

    strategy = FedSelectStrategy({"preset": "tiny", "pca_components": 3}, model=run)
    chosen = strategy.make_agent(env.selection_spec)  # what the strategy builds after its profiling round
    assert isinstance(chosen, FavorAgent)
    np.testing.assert_array_equal(chosen.predict(obs)[0], agent.predict(obs)[0])
    with pytest.raises(ValueError, match="not both"):
        FedSelectStrategy({"preset": "tiny"}, agent="afl", model=run)


def test_deploy_takes_a_loaded_model_with_its_training_config():
    from stable_baselines3 import PPO

    env = FedSelectEnv(config={"preset": "tiny"})
    model = PPO("MultiInputPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")
    policy = deploy(model, env.selection_spec, dict(env.config), seed=1)
    assert isinstance(policy, ModelPolicy) and policy.model is model  # told a PPO by what it holds
    with pytest.raises(ValueError, match="train_config"):
        deploy(model, env.selection_spec)


def test_per_client_models_deploy_from_their_file():
    assert DEPLOYMENTS["per_client"].from_path and DEPLOYMENTS["per_client"].agent == "per_client"
    assert DEPLOYMENTS["per_client"].selector.__module__ == PerClientAgent.__module__
