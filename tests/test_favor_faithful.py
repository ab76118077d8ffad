"""FAVOR as the paper defines it (issue #17, SPEC §2, §4): the weight state, K-Center, Power-of-Choice."""
import numpy as np
import pytest
import torch

import agents
from fedsel_env.env import FedSelectEnv
from fedsel_env.config import make_config


def test_init_federation_fixes_w0_profiling_and_pca_across_episodes():
    """Two episodes of one federation give the same weights[0] and the same projection of a given model."""
    env = FedSelectEnv(preset="tiny", config={"federation_seed": 3, "init": "federation"})
    obs_a, _ = env.reset(seed=1)
    probe = torch.randn(env.model_size, generator=torch.Generator().manual_seed(0))
    proj_a = env.view.pca.project(probe)
    obs_b, _ = env.reset(seed=2)
    np.testing.assert_array_equal(obs_a["weights"], obs_b["weights"])  # w_0 and the profiling round's models
    np.testing.assert_array_equal(proj_a, env.view.pca.project(probe))  # the same basis
    # ...while the episodes themselves differ (system draws, minibatch orders)
    assert not np.array_equal(obs_a["clients"], obs_b["clients"])


def test_init_episode_draws_a_new_w0_per_episode():
    env = FedSelectEnv(preset="tiny", config={"federation_seed": 3})
    assert env.config["init"] == "episode"
    obs_a, _ = env.reset(seed=1)
    obs_b, _ = env.reset(seed=2)
    assert not np.array_equal(obs_a["weights"][0], obs_b["weights"][0])


def test_init_field_is_validated_and_favor_preset_uses_federation():
    assert make_config(preset="favor_fmnist")["init"] == "federation"
    with pytest.raises(ValueError, match="'init'"):
        make_config({"init": "global"})
