"""Vector-env indices and shapes, closed envs, and the single env's end of episode (issue #44).

Every bad batch or index is a ``ValueError`` before any sub-env moves; a closed vector env refuses to step or reset;
``num_envs = 10**12`` is refused by the memory check before anything per sub-env is built; a single env refuses a
step after its episode ended (it used to play rounds 6-8 of a 5-round episode).
"""
from __future__ import annotations

import numpy as np
import pytest

from fedsel_env.env import FedSelectEnv
from fedsel_env.vector import FedSelectVectorEnv

E = 2


@pytest.fixture(scope="module")
def venv():
    env = FedSelectVectorEnv(E, preset="tiny", max_rounds=3)
    env.reset(seed=0)
    yield env
    env.close()


def _state(venv):
    return [(e._round, e.federation.global_params.clone()) for e in venv.envs]


def _same(a, b):
    return all(ra == rb and bool((pa == pb).all()) for (ra, pa), (rb, pb) in zip(a, b))


def _good(venv):
    return np.stack([np.random.default_rng(i).random(venv.single_action_space.shape).astype(np.float32)
                     for i in range(E)])


@pytest.mark.parametrize("make", [lambda g: g[:-1], lambda g: np.concatenate([g, g[:1]]), lambda g: 0.5,
                                  lambda g: None, lambda g: [g[0], g[1][:3]]],
                         ids=["E-1", "E+1", "scalar", "None", "ragged"])
def test_a_batch_that_is_not_e_actions_is_refused_before_anything_moves(venv, make):
    before = _state(venv)
    with pytest.raises(ValueError, match=r"actions: expected one action per sub-env, an array of shape \(2, "):
        venv.step(make(_good(venv)))
    assert _same(before, _state(venv))


@pytest.mark.parametrize("index", [E, 5, -1, 1.7, True, np.bool_(True), "0", None])
def test_step_some_and_reset_some_refuse_bad_indices(venv, index):
    before = _state(venv)
    action = _good(venv)[0]
    with pytest.raises(ValueError, match=r"step_some: sub-env index .* is invalid: expected an integer in \[0, 2\)"):
        venv.step_some({0: action, index: action})  # the good one does not move either
    with pytest.raises(ValueError, match=r"reset_some: sub-env index .* is invalid"):
        venv.reset_some({0: 1, index: 1})
    assert _same(before, _state(venv))


def test_step_some_and_reset_some_refuse_a_list(venv):
    with pytest.raises(ValueError, match=r"step_some: expected a mapping of sub-env index.*got a list"):
        venv.step_some([_good(venv)[0]])
    with pytest.raises(ValueError, match=r"reset_some: expected a mapping.*got a list"):
        venv.reset_some([0, 1])


def test_numpy_integer_indices_are_indices(venv):
    out = venv.step_some({np.int64(1): _good(venv)[1]})
    assert list(out) == [1]


def test_a_closed_vector_env_refuses_to_step_or_reset():
    env = FedSelectVectorEnv(E, preset="tiny", max_rounds=3)
    env.reset(seed=0)
    env.close()
    for call in (lambda: env.step(_good(env)), lambda: env.reset(seed=0), lambda: env.reset_some({0: 0}),
                 lambda: env.step_some({0: _good(env)[0]})):
        with pytest.raises(RuntimeError, match=r"on a closed FedSelectVectorEnv"):
            call()


def test_a_huge_num_envs_is_refused_by_the_memory_check_before_any_list_of_configs():
    with pytest.raises(ValueError, match=r"num_envs = 1000000000000 needs about .* use num_envs <= \d+"):
        FedSelectVectorEnv(10**12, preset="tiny")


def test_the_single_env_refuses_a_step_after_the_episode_ended():
    env = FedSelectEnv(preset="tiny", max_rounds=2, target_accuracy=1.0)
    obs, _ = env.reset(seed=0)
    action = np.ones(env.num_clients, dtype=np.float32)
    assert env.step(action)[3] is False
    assert env.step(action)[3] is True  # truncated at the budget
    with pytest.raises(RuntimeError, match=r"the episode ended \(terminated or truncated\) at step 2 of 2: "
                                           r"call reset\(\)"):
        env.step(action)
    env.reset(seed=1)  # a new episode steps again
    assert env.step(action)[2:4] == (False, False)


def test_sb3_and_gymnasium_wrappers_reset_at_the_end_of_an_episode():
    """DummyVecEnv and Gymnasium's vector env reset a sub-env whose episode ended: nothing steps past the end."""
    from stable_baselines3.common.env_checker import check_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    check_env(FedSelectEnv(preset="tiny", max_rounds=2), warn=False)
    vec = DummyVecEnv([lambda: FedSelectEnv(preset="tiny", max_rounds=2)])
    vec.reset()
    for _ in range(5):  # two and a half episodes
        vec.step(np.ones((1, vec.envs[0].num_clients), dtype=np.float32))
    venv = FedSelectVectorEnv(E, preset="tiny", max_rounds=2)
    venv.reset(seed=0)
    for _ in range(5):
        venv.step(_good(venv))
    venv.close()
