"""Gymnasium's and Stable-Baselines3's env checkers on every registered ``fedsel/`` id (docs/SPEC.md §2, issue #45).

Both checkers step the env; Gymnasium's also resets it twice with one seed and compares the two steps' ``info``
(``data_equivalence``: NaN != NaN, so a NaN in ``info`` failed it on ``fedsel/FedSelect-DQN-v0`` and every
FedSelect-Bench id before issue #45). Ids whose registered config takes more than a few seconds to build (the
Fashion-MNIST ones: 100 to 1,000 clients, a profiling round over all of them; 13-100 s each here) are checked
with :data:`SMALLER`: the same config — dataset, partition, action mode, observation, reward, adversary, system —
with fewer and smaller clients, and for FAVOR's id the 21,840-parameter ``fedmgda_cnn`` in place of ``favor_cnn``
(431,080: the PCA of its weights at each reset alone made the check take 31 s).
"""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import fedsel_env

#: every registered fedsel id
IDS = sorted(i for i in gym.registry if i.startswith("fedsel/"))
#: the overrides of the ids checked at a smaller size (the registered config otherwise)
SMALLER = {
    "fedsel/FedSelect-FAVOR-FMNIST-v0": {"num_clients": 12, "samples_per_client": 10, "local_epochs": 1,
                                         "model": "fedmgda_cnn"},
    "fedsel/Bench-QuantitySkew-v0": {"num_clients": 10, "samples_per_client": 20},
    "fedsel/Bench-PowerOfChoice-v0": {"num_clients": 10, "samples_per_client": 20},
    "fedsel/Bench-Large-v0": {"num_clients": 20, "samples_per_client": 10},
    "fedsel/Bench-FMNISTControl-v0": {"num_clients": 10, "samples_per_client": 20},
}


def make(env_id: str) -> gym.Env:
    return gym.make(env_id, **SMALLER.get(env_id, {}))


def test_every_registered_id_is_checked():
    """The list is taken from Gymnasium's registry, so a new id is checked as soon as it is registered."""
    assert {*fedsel_env.ENV_IDS.values(), fedsel_env.MO_ENV_ID} <= set(IDS)
    assert {f"fedsel/Bench-{n}-v0" for n in fedsel_env.bench.SCENARIOS} <= set(IDS)
    assert set(SMALLER) <= set(IDS)


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_and_sb3_checkers_pass(env_id):
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = make(env_id)
    vector_reward = hasattr(env.unwrapped, "reward_space")
    with warnings.catch_warnings():
        if vector_reward:  # MO-Gymnasium's convention: Gymnasium's checker warns that the reward is not a float
            warnings.filterwarnings("ignore", message=".*reward returned by `step\\(\\)` must be a float")
        gym_check(env.unwrapped, skip_render_check=True)
    env.close()
    env = make(env_id)
    if vector_reward:  # SB3 needs a scalar: the weighted sum MO-Gymnasium's LinearReward gives, as SB3 trains it
        weight = np.ones(env.unwrapped.reward_dim, dtype=np.float32)
        env = gym.wrappers.TransformReward(env, lambda r: float(np.dot(weight, r)))
    sb3_check(env, warn=False)
    env.close()


def test_two_runs_of_one_seed_give_equal_info_without_a_responder():
    """Client 0 unavailable in ``one`` mode: nobody responds, nothing is measured — and the step's ``info`` is
    the same in two runs (``improved_fraction`` left out, not NaN)."""
    from gymnasium.utils.env_checker import data_equivalence

    infos = []
    for _ in range(2):
        env = gym.make("fedsel/FedSelect-DQN-v0").unwrapped
        env.reset(seed=0)
        client = int(np.flatnonzero(~env.action_masks())[0]) if not env.action_masks().all() else 0
        env.view.available[client] = False  # make sure this client cannot respond
        infos.append(env.step(client)[4])
        env.close()
    assert infos[0]["responders"] == [] and "improved_fraction" not in infos[0]
    assert data_equivalence(infos[0], infos[1])
