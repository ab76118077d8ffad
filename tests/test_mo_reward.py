"""The vector reward (issue #16): MO-Gymnasium's convention — ``env.unwrapped.reward_space`` a Box,
``step`` a float32 vector in it — with each objective checked against a hand computation from ``info``,
the same dynamics as the scalar env, MO-Gymnasium's own wrappers and Gymnasium's checker over
``LinearReward`` (as MO-Gymnasium's tests check its envs), bad ``objectives`` refused, evaluation records."""
import gymnasium as gym
import numpy as np
import pytest

import agents
import fedsel_env  # noqa: F401  (registers the ids)
from fedsel_env.env import FedSelectEnv
from fedsel_eval import run_episode

MO_ID = "fedsel/MOFedSelect-v0"


def jain(c):
    c = np.asarray(c, dtype=np.float64)
    return 1.0 if not c.any() else c.sum() ** 2 / (c.size * (c * c).sum())


def actions(env, n, seed=0):
    """A fixed sequence of valid ``topk`` actions (scores)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, env.unwrapped.num_clients).astype(np.float32) for _ in range(n)]


def rollout(env, seed=0):
    """Play one episode with :func:`actions`; return (rewards, infos from reset on)."""
    _, info = env.reset(seed=seed)
    rewards, infos = [], [info]
    for a in actions(env, env.unwrapped.max_steps):
        _, r, terminated, truncated, info = env.step(a)
        rewards.append(r)
        infos.append(info)
        if terminated or truncated:
            break
    return rewards, infos


@pytest.fixture(scope="module")
def mo_env():
    env = gym.make(MO_ID, preset="tiny")
    yield env
    env.close()


def test_reward_is_a_float32_vector_in_reward_space(mo_env):
    space = mo_env.unwrapped.reward_space
    n = mo_env.unwrapped.num_clients  # tiny: 8
    assert isinstance(space, gym.spaces.Box) and space.shape == (3,) and space.dtype == np.float32
    np.testing.assert_array_equal(space.low, np.float32([-1.0, -np.inf, 1 / n - 1]))
    np.testing.assert_array_equal(space.high, np.float32([1.0, 0.0, 1 - 1 / n]))
    rewards, _ = rollout(mo_env)
    assert len(rewards) >= 3
    for r in rewards:
        assert isinstance(r, np.ndarray) and r.shape == (3,) and r.dtype == np.float32
        assert space.contains(r)


def test_objectives_and_a_weighted_sum_match_a_hand_computation(mo_env):
    pytest.importorskip("mo_gymnasium", reason="the optional extra 'mo' is not installed: pip install '.[mo]'")
    from mo_gymnasium.wrappers import LinearReward

    weights = np.array([10.0, 0.05, 2.0])
    rewards, infos = rollout(mo_env, seed=3)
    scalar_rewards, _ = rollout(LinearReward(mo_env, weight=weights), seed=3)
    for t, (r, s) in enumerate(zip(rewards, scalar_rewards), 1):
        before, after = infos[t - 1], infos[t]
        hand = [after["accuracy"] - before["accuracy"], -after["round_time"],
                jain(after["participation"]) - jain(before.get("participation", np.zeros(8)))]
        np.testing.assert_allclose(r, hand, rtol=1e-6, atol=1e-7)
        assert s == pytest.approx(float(np.dot(hand, weights)), rel=1e-6, abs=1e-6)
    # over an episode each change telescopes: the sum is final minus initial
    total = np.sum(rewards, axis=0, dtype=np.float64)
    assert total[0] == pytest.approx(infos[-1]["accuracy"] - infos[0]["accuracy"], abs=1e-6)
    assert total[1] == pytest.approx(-infos[-1]["clock"], rel=1e-6)
    assert total[2] == pytest.approx(infos[-1]["jain_index"] - 1.0, abs=1e-6)


def test_vector_reward_leaves_the_dynamics_alone(mo_env):
    _, mo_infos = rollout(mo_env, seed=1)
    _, infos = rollout(gym.make("fedsel/FedSelect-Tiny-v0"), seed=1)
    assert [i["accuracy"] for i in mo_infos] == [i["accuracy"] for i in infos]
    assert [i.get("clock") for i in mo_infos] == [i.get("clock") for i in infos]


def test_mo_gymnasium_wrappers_and_gymnasium_checker(mo_env):
    """MO-Gymnasium's tests run Gymnasium's ``check_env`` over ``LinearReward(env)``; under Gymnasium 1.4
    that fails for MO-Gymnasium's own envs too (``LinearReward`` puts one weight array in every
    ``info``: "infos ... share an object"), so the checker runs over the env itself here."""
    mo_gym = pytest.importorskip("mo_gymnasium", reason="the optional extra 'mo' is not installed: pip install '.[mo]'")
    from gymnasium.utils.env_checker import check_env
    from mo_gymnasium.wrappers import MORecordEpisodeStatistics
    from mo_gymnasium.wrappers.vector import MOSyncVectorEnv

    env = mo_gym.make(MO_ID, preset="tiny")  # MO-Gymnasium's make (its env checker off, as registered)
    with pytest.warns(UserWarning, match="reward returned by `step\\(\\)` must be a float"):
        check_env(env.unwrapped, skip_render_check=True)  # only the scalar-reward warning
    assert env.unwrapped.reward_dim == 3  # MO-Gymnasium's tests ask for it beside reward_space
    recorded = MORecordEpisodeStatistics(env, gamma=1.0)
    rewards, infos = rollout(recorded)
    np.testing.assert_allclose(infos[-1]["episode"]["r"], np.sum(rewards, axis=0), rtol=1e-5)
    assert infos[-1]["episode"]["l"] == len(rewards)

    envs = MOSyncVectorEnv([lambda: mo_gym.make(MO_ID, preset="tiny")] * 2)
    envs.reset(seed=0)
    _, r, *_ = envs.step(np.stack(actions(env, 2)))
    assert r.shape == (2, 3)
    envs.close()


def test_objectives_are_chosen_by_name():
    env = FedSelectEnv(preset="tiny", reward="vector",
                       reward_params={"objectives": ["accuracy_spread", "participation_fairness"]})
    np.testing.assert_array_equal(env.reward_space.low, np.float32([-0.5, 1 / 8 - 1]))
    rewards, infos = rollout(env, seed=2)
    for t, r in enumerate(rewards, 1):
        spread = -(np.std(infos[t]["client_accuracies"]) - np.std(infos[t - 1]["client_accuracies"]))
        assert r[0] == pytest.approx(spread, abs=1e-6)
    assert not hasattr(FedSelectEnv(preset="tiny"), "reward_space")  # a scalar reward declares none


@pytest.mark.parametrize("objectives, message", [
    (["accuracy_gain", "speed"], r"unknown objective 'speed'; registered objectives: \['accuracy_gain', "),
    ([], "expected a non-empty list of distinct objective names"),
    ("accuracy_gain", "expected a non-empty list of distinct objective names"),
    (["round_time", "round_time"], "distinct"),
])
def test_bad_objectives_name_the_fix(objectives, message):
    with pytest.raises(ValueError, match=message):
        FedSelectEnv(preset="tiny", reward="vector", reward_params={"objectives": objectives})


def test_evaluation_records_the_return_per_objective(mo_env):
    env = mo_env.unwrapped
    record = run_episode(env, agents.make("random", env.selection_spec, seed=0), seed=0)
    assert len(record["return_vector"]) == 3 and np.isnan(record["metrics"]["episode_return"])
    assert record["return_vector"][1] == pytest.approx(-record["metrics"]["sim_time"], rel=1e-6)
    assert record["return_vector"][2] == pytest.approx(record["metrics"]["jain_index"] - 1.0, abs=1e-6)


def test_train_agent_refuses_a_vector_reward_naming_the_fix(tmp_path):
    import train_agent

    with pytest.raises(ValueError, match="LinearReward"):
        train_agent.main(["--algo", "ppo", "--env", "tiny", "--env-kwargs", "reward=vector", "-f", str(tmp_path)])
    assert not any(tmp_path.iterdir()), "nothing half-written"
