"""experiments/rbcsf_fairness.py: the queue replay is RBCS-F's own queues, the sweeps' β are feasible,
the final-accuracy tail and the selections an episode record carries."""
from __future__ import annotations

import numpy as np
import pytest

import agents
from experiments import rbcsf_fairness as rf
from fedsel_env.config import make_config
from fedsel_env.env import FedSelectEnv
from fedsel_eval.episodes import run_episode

SMALL = {"num_clients": 8, "clients_per_round": 2, "model": "logreg", "samples_per_client": 20, "max_rounds": 25}


@pytest.mark.parametrize("v,beta", [(1.0, None), (50.0, 0.2), (0.0, 0.25)])
def test_replayed_queues_are_the_agents_queues(v, beta):
    env = FedSelectEnv(config=make_config(SMALL, preset="hetero"))
    agent = agents.make("rbcsf", env.selection_spec, seed=0, v=v, beta=beta)
    record = run_episode(env, agent, seed=3)
    assert len(record["curves"]["selected"]) == 25
    assert all(len(s) == len(set(s)) <= 2 for s in record["curves"]["selected"])
    z = rf.replay_queues(record["curves"]["selected"], 8, agent.beta)
    assert z.shape == (25, 8)
    np.testing.assert_array_equal(z[-1], agent.queues)
    # a client's rate is at least β − Z_T / T (Z_{T} >= β·T − its participation count)
    counts = np.asarray(record["clients"]["participation"])
    assert np.all(counts / 25 >= agent.beta - z[-1] / 25 - 1e-12)


def test_replay_on_a_hand_made_schedule():
    z = rf.replay_queues([[0], [1], [0], []], n=2, beta=0.5)
    np.testing.assert_allclose(z, [[0.0, 0.5], [0.5, 0.0], [0.0, 0.5], [0.5, 1.0]])


def test_sweeps_are_feasible_and_named():
    specs = rf.policy_specs(rf.VS, rf.BETA_SHARES, m=8, n=40)
    labels = [label for _, label, _ in specs]
    assert len(set(labels)) == len(labels) and labels[-2:] == ["fedcs", "random"]
    betas = [b for _, _, b in specs if np.isfinite(b)]
    assert max(betas) == pytest.approx(8 / 40) and min(betas) == pytest.approx(0.05)
    for spec, _, beta in specs[:-2]:  # every RBCS-F setting builds (β·N <= m)
        from fedsel_eval.policies import parse_policy
        p = parse_policy(spec)
        assert p.source == "rbcsf" and p.params.get("beta", 0.75 * 8 / 40) == pytest.approx(beta)


def test_tail_accuracy_averages_the_last_rounds():
    rec = {"curves": {"accuracy": [0.0] + [0.1] * 95 + [0.9] * 5}}
    assert rf.tail_accuracy(rec, 0.05) == pytest.approx(0.9)
    assert rf.tail_accuracy({"curves": {"accuracy": [0.0, 0.4, 0.6]}}, 0.05) == pytest.approx(0.6)
