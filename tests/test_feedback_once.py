"""Feedback reaches an agent once per response (issue #14), also when a step is a fraction of a round."""
import numpy as np
import pytest

import agents
from fedsel_env.env import FedSelectEnv


@pytest.mark.parametrize("step", [1.0, "1/K"])
@pytest.mark.parametrize("name", ["rbcsf", "fedcs"])
def test_each_response_is_one_ridge_observation(name, step):
    """On `tiny` (K = 3) in the `one` mode, the agents' ridge regressions see one observation per response.

    Before the redesign, with one_mode_step 1/K the "last round" flags stayed set for K steps, and
    9 responses became 23 ridge observations, each repeat with the wrong context.
    """
    env = FedSelectEnv(preset="tiny", config={"action_mode": "one", "one_mode_step": step, "max_rounds": 4})
    agent = agents.make(name, env.selection_spec, seed=0)
    obs, _ = env.reset(seed=1)
    responses = 0
    done = False
    while not done:
        action, _ = agent.predict(obs)
        obs, _, terminated, truncated, info = env.step(action)
        responses += len(info["responders"])
        done = terminated or truncated
    agent.predict(obs)  # the agent reads the last step's feedback when it next decides
    assert responses >= 4
    assert int(agent.ridge.count.sum()) == responses


def test_last_round_flags_name_the_last_step_only():
    env = FedSelectEnv(preset="tiny", config={"action_mode": "one", "one_mode_step": "1/K",
                                              "system": {"availability": 1.0}})
    env.reset(seed=0)
    cols = [env.selection_spec.client_features.index(c) for c in ("selected_last_round", "responded_last_round")]
    seen = np.zeros(env.num_clients, dtype=int)
    for client in (0, 1, 2, 0):
        obs, *_ = env.step(client)
        flags = obs["clients"][:, cols]
        expect = np.zeros((env.num_clients, 2))
        expect[client] = 1.0
        np.testing.assert_array_equal(flags, expect)
        seen[client] += 1
    np.testing.assert_array_equal(obs["clients"][:, env.selection_spec.client_features.index("participation_rate")] > 0,
                                  seen > 0)
