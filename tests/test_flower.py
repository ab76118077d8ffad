"""Flower integration (issue #9): a fedsel agent picks the clients of a Flower simulation.

One short Flower simulation (Ray backend, 2 CPUs, Ray's temporary folder inside the
test's tmp_path): 8 SuperNodes on the ``tiny`` federation (digits, logistic regression,
K = 3), the Power-of-choice agent choosing from the observation built from the clients'
reports, three rounds. Checked: the SuperNodes that trained are exactly the clients the
agent chose, every round; the observation lies in the env's observation space and its
reported losses are the simulator's; and replaying the agent's choices in
``FedSelectEnv`` from the same w_0 and train seed gives the same global model after
every round — so Flower trained those clients' partitions with the env's SGD.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr")  # the optional extra: pip install ".[flower]"
ray = pytest.importorskip("ray")

from flwr.app import ArrayRecord  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from fedsel_env.env import FedSelectEnv  # noqa: E402
from fedsel_env.spec import FEATURE_INDEX  # noqa: E402
from fedsel_flower import FedSelectStrategy, make_client_app, make_server_app  # noqa: E402
from fedsel_flower.task import state_dict_of  # noqa: E402

ROUNDS = 3


def test_flower_round(tmp_path, monkeypatch):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = {"preset": "tiny", "system": {"availability": 1.0}, "federation_seed": 0}
    env = FedSelectEnv(config=cfg)
    env_obs, _ = env.reset(seed=3)
    fed = env.federation
    strategy = FedSelectStrategy(cfg, agent="rpow_d", agent_seed=0, train_seed=fed.train_seed, timeout=60)
    w0 = ArrayRecord(state_dict_of(fed.layout, fed.global_params))
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir()
    # Ray's socket paths must stay under 107 bytes: a short link to the folder inside tmp_path.
    link = Path(tempfile.gettempdir() if len(tempfile.gettempdir()) < 20 else "/tmp") / f"fsr{os.getpid()}"
    link.symlink_to(ray_tmp, target_is_directory=True)
    try:
        run_simulation(server_app=make_server_app(strategy, ROUNDS, initial_arrays=w0, timeout=60),
                       client_app=make_client_app(), num_supernodes=env.num_clients,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       "init_args": {"num_cpus": 2, "_temp_dir": str(link)}})
        assert not ray.is_initialized()  # Flower's backend shut Ray down
    finally:
        if ray.is_initialized():
            ray.shutdown()
        link.unlink()
    assert any(ray_tmp.iterdir())  # Ray wrote into the test's folder

    assert len(strategy.history) == ROUNDS
    for h in strategy.history:
        assert len(h["selected"]) == env.k
        # the SuperNodes that trained are exactly the agent's choice
        np.testing.assert_array_equal(h["trained"], np.sort(h["selected"]))
        assert sorted(h["sent_nodes"]) == sorted(strategy.node_of[int(c)] for c in h["selected"])
        assert env.observation_space.contains(h["observation"])

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
