"""The objective as the reward (issue #41): an episode's return is the FedSelect-Bench score.

Every scenario's episode is played and the rewards' sum checked against
``fedsel_env.bench.episode_objective`` exactly (bit for bit), as ``fedsel_eval`` sums it.
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import fedsel_env  # noqa: F401  (registers the ids)
from agents.random_selection import RandomAgent
from fedsel_env.bench import SCENARIOS, episode_objective
from fedsel_env.env import FedSelectEnv
from fedsel_env.rewards import RoundOutcome, make_reward
from fedsel_env.sim import data_files
from fedsel_eval.episodes import run_episode

FMNIST = [name for name, sc in SCENARIOS.items() if sc.config.get("dataset") == "fashion_mnist"]


def _play(config, seed):
    env = FedSelectEnv(config=config)
    rewards = []
    obs, info = env.reset(seed=seed)
    agent = RandomAgent(env.selection_spec, seed=seed)
    done = False
    while not done:
        action, _ = agent.predict(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        done = terminated or truncated
    env.close()
    return rewards


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_return_is_the_score_on_every_scenario(name):
    sc = SCENARIOS[name]
    if name in FMNIST and not data_files.DEBIAN_FASHION_MNIST.is_dir():
        pytest.skip("Debian's dataset-fashion-mnist (scripts/setup.sh installs it)")
    config = {**sc.env_config(), **sc.reward_config()}
    if name in FMNIST:  # a few rounds: the same conventions (a missed Ω counts the cap), seconds not minutes
        config["max_rounds"] = 4
    env = FedSelectEnv(config=config)
    for seed in (9000, 9001):
        record = run_episode(env, RandomAgent(env.selection_spec, seed=seed), seed)
        value, censored = episode_objective(sc, record)
        assert math.isfinite(value)
        expected = -value if sc.lower_is_better else value
        assert record["metrics"]["episode_return"] == expected, (name, seed, censored)
    env.close()


def test_a_reached_target_and_a_missed_one_both_sum_to_the_score():
    sc = SCENARIOS["NoisyLabels"]
    reached = {**sc.env_config(), **sc.reward_config(), "target_accuracy": 0.3}
    missed = {**sc.env_config(), **sc.reward_config(), "target_accuracy": 0.99, "max_rounds": 7}
    for config, reach in ((reached, True), (missed, False)):
        env = FedSelectEnv(config=config)
        record = run_episode(env, RandomAgent(env.selection_spec, seed=1), 1)
        assert record["reached"] is reach
        assert record["metrics"]["episode_return"] == -episode_objective(sc, record)[0]
        if not reach:
            assert record["metrics"]["episode_return"] == -7.0
        env.close()


@pytest.mark.parametrize("objective", ["final_accuracy", "time_to_target", "acc_worst10"])
def test_other_objectives_on_a_digits_federation(objective):
    from fedsel_env.bench import Scenario

    base = SCENARIOS["Churn"]
    sc = Scenario("x", base.config, objective, "")
    config = {**sc.env_config(), **sc.reward_config(), "max_rounds": 12}
    for seed in range(3):
        rewards = _play(config, seed)
        env = FedSelectEnv(config=config)
        record = run_episode(env, RandomAgent(env.selection_spec, seed=seed), seed)
        env.close()
        value, _ = episode_objective(sc, record)
        assert sum(rewards) == (-value if sc.lower_is_better else value)
        assert len(rewards) == 12
        if objective == "final_accuracy":  # dense: the rounds before the last carry the accuracy's changes
            assert any(r != 0.0 for r in rewards[:-1])


def test_bench_ids_default_to_the_objective_and_favor_ids_keep_favor():
    for name, sc in SCENARIOS.items():
        spec = gym.spec(sc.env_id)
        assert spec.kwargs["config"]["reward"] == "objective"
        assert spec.kwargs["config"]["reward_params"] == {"objective": sc.objective}
    for env_id in ("fedsel/FedSelect-v0", "fedsel/FedSelect-DQN-v0"):
        env = gym.make(env_id)
        assert env.unwrapped.config["reward"] == "favor"
        env.close()


def test_rounds_and_time_rewards_on_small_cases():
    rounds = make_reward("objective", {"objective": "rounds_to_target"})
    time = make_reward("objective", {"objective": "time_to_target"})
    o = RoundOutcome(0.5, 0.4, 0.9, 3.25, 2, clock=10.5, prev_clock=7.25)
    assert rounds(o) == -1.0
    assert time(o) == -3.25
    # the clock's step, landing the running sum exactly on minus the clock
    clocks = [0.0, 0.1, 0.30000000000000004, 0.7, 1e6 + 0.1, 1e6 + 0.3]
    total = 0.0
    for before, after in zip(clocks, clocks[1:]):
        total += time(RoundOutcome(0.5, 0.4, 0.9, after - before, 1, clock=after, prev_clock=before))
        assert total == -after


def test_accuracy_reward_lands_exactly_on_the_final_value():
    reward = make_reward("objective", {"objective": "final_accuracy"})
    rng = np.random.default_rng(0)
    for _ in range(200):
        accs = rng.uniform(0.05, 1.0, size=int(rng.integers(1, 30)))
        accs.sort()  # rising accuracy, as training goes (a late collapse is the documented ulp case)
        total, prev = 0.0, 0.0
        for t, acc in enumerate(accs, start=1):
            total += reward(RoundOutcome(float(acc), prev, 1.0, 1.0, t, final=t == len(accs)))
            prev = float(acc)
        assert total == float(accs[-1])


@pytest.mark.parametrize("params", [{"objective": "rounds"}, {"objective": 3}, {"objective": None}])
def test_bad_objective_is_named(params):
    with pytest.raises(ValueError, match="reward 'objective' parameter 'objective'"):
        make_reward("objective", params)
    with pytest.raises(ValueError, match="objective"):
        FedSelectEnv(config={"preset": "tiny", "reward": "objective", "reward_params": params})


def test_train_agent_and_evaluate_read_a_bench_id_with_its_objective_reward():
    from fedsel_env.config import resolve_env

    preset, overrides = resolve_env("fedsel/Bench-Stragglers-v0")
    assert overrides["reward"] == "objective" and overrides["reward_params"] == {"objective": "time_to_target"}
