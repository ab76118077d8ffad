"""The ``one`` action mode's clock (issue #45): a step of ``one_mode_step`` s is charged s of its exchange time.

FAVOR trains one client a step, each step standing for 1/K of a K-client round (``one_mode_step: "1/K"``).
Before issue #45 each step put the client's whole exchange time on the clock, so an episode's simulated time
was K exchanges end to end a round — about K times what the deployed policy, which runs the K clients of a
round at once, takes (776 s against ~175 s in the issue's DQN log).
"""
import numpy as np
import pytest


def _play(make_env, step, actions):
    env = make_env(action_mode="one", one_mode_step=step, max_rounds=20, system={"availability": 1.0})
    env.reset(seed=5)
    out = []
    for a in actions:
        tau = float(env.federation.system.exchange_times(np.array([a]))[0])  # the open round's exchange time
        _, _, term, trunc, info = env.step(a)
        out.append((tau, info["round_time"], info["clock"]))
        if term or trunc:
            break
    return out


def test_a_step_is_charged_its_share_of_the_exchange_time(make_env):
    k = make_env().k
    steps = _play(make_env, "1/K", [0, 1, 2, 3, 4, 5])
    clock = 0.0
    for tau, round_time, info_clock in steps:
        assert tau > 0 and round_time == pytest.approx(tau / k, rel=1e-12)
        clock += tau / k
        assert info_clock == pytest.approx(clock, rel=1e-12)


def test_the_clock_of_s_steps_is_s_times_that_of_whole_rounds(make_env):
    """The same clients on the same seed: the system's draws do not depend on the model, so the exchange times
    are the same and only the share charged differs."""
    actions = [3, 0, 5, 1, 4, 2, 0, 3]
    whole, quarter = _play(make_env, 1.0, actions), _play(make_env, 0.25, actions)
    assert [t for t, _, _ in whole] == [t for t, _, _ in quarter]
    assert [c * 0.25 for _, _, c in whole] == pytest.approx([c for _, _, c in quarter], rel=1e-12)
    assert [rt for _, rt, _ in whole] == [t for t, _, _ in whole]  # s = 1: the whole exchange, as before


def test_other_modes_charge_the_slowest_responder(make_env):
    env = make_env(action_mode="subset", system={"availability": 1.0})
    env.reset(seed=5)
    tau = env.federation.system.exchange_times(np.array([0, 3]))
    _, _, _, _, info = env.step(np.array([1, 0, 0, 1, 0, 0]))
    assert info["round_time"] == float(tau.max()) and info["clock"] == float(tau.max())
