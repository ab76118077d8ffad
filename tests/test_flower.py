"""Flower integration (issue #9): a fedsel agent picks the clients of a Flower simulation.

One short Flower simulation (Ray backend, 2 CPUs, Ray's temporary folder inside the
test's tmp_path): 8 SuperNodes on the ``tiny`` federation (digits, logistic regression,
K = 3), the Power-of-choice agent choosing from the observation built from the clients'
reports, three rounds. Checked: the SuperNodes that trained are exactly the clients the
agent chose, every round; the observation lies in the env's observation space and its
reported losses are the simulator's; and replaying the agent's choices in
``FedSelectEnv`` from the same w_0 and train seed gives the same global model after
every round — so Flower trained those clients' partitions with the env's SGD.

A second simulation runs a trained per-client selector (issue #19: an ensemble of a few-step
Double DQN and PPO per-client model, so both saved forms load in the strategy): the SuperNodes
that trained are the clients it chose, and its choices are those ``agents.make("per_client",
...)`` makes on the same observations. Without Ray: a per-client model of another PCA width is
refused when the strategy is built, with the width to set.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr", reason="the optional extra 'flower' is not installed: pip install '.[flower]'")
ray = pytest.importorskip("ray", reason="the optional extra 'flower' (flwr[simulation], which brings ray) is not "
                                        "installed: pip install '.[flower]'")

from flwr.app import ArrayRecord  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from fedsel_env.env import FedSelectEnv  # noqa: E402
from fedsel_env.spec import FEATURE_INDEX  # noqa: E402
from fedsel_flower import FedSelectStrategy, make_client_app, make_server_app  # noqa: E402
from fedsel_flower.task import state_dict_of  # noqa: E402

ROUNDS = 3


def simulate(strategy: FedSelectStrategy, env: FedSelectEnv, tmp_path: Path) -> None:
    """ROUNDS rounds of a Flower simulation (Ray, 2 CPUs) of ``strategy`` from the env's w_0."""
    fed = env.federation
    w0 = ArrayRecord(state_dict_of(fed.layout, fed.global_params))
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir()
    # Ray's socket paths must stay under 107 bytes: a short link to the folder inside tmp_path.
    link = Path(tempfile.gettempdir() if len(tempfile.gettempdir()) < 20 else "/tmp") / f"fsr{os.getpid()}"
    link.symlink_to(ray_tmp, target_is_directory=True)
    try:
        run_simulation(server_app=make_server_app(strategy, ROUNDS, initial_arrays=w0, timeout=300),
                       client_app=make_client_app(), num_supernodes=env.num_clients,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       "init_args": {"num_cpus": 2, "_temp_dir": str(link)}})
        assert not ray.is_initialized()  # Flower's backend shut Ray down
    finally:
        if ray.is_initialized():
            ray.shutdown()
        link.unlink()
    assert any(ray_tmp.iterdir())  # Ray wrote into the test's folder


def check_trained_as_chosen(strategy: FedSelectStrategy, env: FedSelectEnv) -> None:
    """Every round: K clients chosen, exactly their SuperNodes were sent the task and trained."""
    assert len(strategy.history) == ROUNDS
    for h in strategy.history:
        assert len(h["selected"]) == env.k
        # the SuperNodes that trained are exactly the agent's choice
        np.testing.assert_array_equal(h["trained"], np.sort(h["selected"]))
        assert sorted(h["sent_nodes"]) == sorted(strategy.node_of[int(c)] for c in h["selected"])
        assert env.observation_space.contains(h["observation"])


@pytest.mark.slow
def test_flower_round(tmp_path, monkeypatch):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = {"preset": "tiny", "system": {"availability": 1.0}, "federation_seed": 0}
    env = FedSelectEnv(config=cfg)
    env_obs, _ = env.reset(seed=3)
    fed = env.federation
    strategy = FedSelectStrategy(cfg, agent="rpow_d", agent_seed=0, train_seed=fed.train_seed, timeout=300)
    simulate(strategy, env, tmp_path)
    check_trained_as_chosen(strategy, env)

    # Replay the agent's choices in the simulator: the same clients, SGD and backend give the same models.
    for h in strategy.history:
        flower_obs = h["observation"]
        col = FEATURE_INDEX["loss"]
        np.testing.assert_allclose(flower_obs["clients"][:, col], env_obs["clients"][:, col], rtol=1e-4, atol=1e-5)
        for name in ("rounds_since_selected", "participation_rate", "selected_last_round", "ctx_cold"):
            np.testing.assert_allclose(flower_obs["clients"][:, FEATURE_INDEX[name]],
                                       env_obs["clients"][:, FEATURE_INDEX[name]], err_msg=name)
        np.testing.assert_allclose(flower_obs["progress"], env_obs["progress"], atol=1e-6)  # round, accuracy
        env_obs, _, _, _, info = env.step(strategy.agent.to_action(h["selected"]))
        np.testing.assert_array_equal(info["responders"], np.sort(h["selected"]))
        torch.testing.assert_close(h["global_params"], fed.global_params, rtol=1e-4, atol=1e-5)


PC_D = 3  # the per-client models' PCA width (configs/pc_*.yml's on tiny); the tiny preset's default is N + 1 = 9


@pytest.fixture(scope="module")
def per_client_models(tmp_path_factory):
    """A per-client Double DQN (one mode, 24 steps) and PPO (topk, 16 steps) on the tiny preset, d = PC_D."""
    from stable_baselines3 import PPO

    from agents.favor import DoubleDQN
    from agents.per_client_net import PerClientActorCriticPolicy, PerClientDQNPolicy

    folder = tmp_path_factory.mktemp("pc")
    base = {"preset": "tiny", "observation": "dict", "pca_components": PC_D}
    dqn_env = FedSelectEnv(config={**base, "action_mode": "one", "one_mode_step": "1/K"})
    ppo_env = FedSelectEnv(config={**base, "action_mode": "topk"})
    dqn = DoubleDQN(PerClientDQNPolicy, dqn_env, learning_starts=4, buffer_size=64, batch_size=4, train_freq=1,
                    seed=0, device="cpu", policy_kwargs={"hidden": 16})
    ppo = PPO(PerClientActorCriticPolicy, ppo_env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu",
              policy_kwargs={"hidden": 16})
    dqn.learn(24)
    ppo.learn(16)
    paths = [str(folder / "dqn.zip"), str(folder / "ppo.zip")]
    dqn.save(paths[0])
    ppo.save(paths[1])
    dqn_env.close()
    ppo_env.close()
    return paths


def test_a_per_client_model_of_another_pca_width_is_refused_before_the_federation_starts(per_client_models):
    for params in ({"model_path": per_client_models[0]}, {"model_path": per_client_models}):
        with pytest.raises(ValueError, match=f"d = {PC_D} PCA components.*d = 9.*pca_components: {PC_D}"):
            FedSelectStrategy({"preset": "tiny"}, agent="per_client", agent_params=params)
    # at the model's width the strategy is built (and the hand-written agents never read a model)
    FedSelectStrategy({"preset": "tiny", "pca_components": PC_D}, agent="per_client",
                      agent_params={"model_path": per_client_models})


@pytest.mark.slow
def test_flower_round_per_client(per_client_models, tmp_path, monkeypatch):
    """A trained per-client selector (issue #19) chooses the clients of a Flower simulation."""
    import agents
    from agents.per_client import PerClientAgent

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = {"preset": "tiny", "system": {"availability": 1.0}, "federation_seed": 0, "pca_components": PC_D}
    env = FedSelectEnv(config=cfg)
    env.reset(seed=3)
    strategy = FedSelectStrategy(cfg, agent="per_client", agent_params={"model_path": per_client_models},
                                 train_seed=env.federation.train_seed, timeout=300)
    simulate(strategy, env, tmp_path)
    assert isinstance(strategy.agent, PerClientAgent) and len(strategy.agent.members) == 2
    check_trained_as_chosen(strategy, env)

    # the same models, loaded afresh for the strategy's problem, choose the same clients from the same observations
    spec = strategy.selection_spec
    assert spec.pca_components == PC_D and spec.num_clients == env.num_clients
    reference = agents.make("per_client", spec, model_path=per_client_models)
    singles = [agents.make("per_client", spec, model_path=p) for p in per_client_models]
    for h in strategy.history:
        obs = h["observation"]
        assert obs["weights"].shape == (env.num_clients + 1, PC_D)
        np.testing.assert_array_equal(h["selected"], np.sort(reference.select(obs)))  # decoded: by index
        action, _ = reference.predict(obs)
        np.testing.assert_array_equal(h["action"], action)
        for single in singles:
            assert np.ptp(single.scores(obs)) > 0  # the models tell the clients apart: the choice is theirs
