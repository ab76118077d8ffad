"""The Plackett–Luce K-of-N policy (issue #41; agents/plackett_luce.py).

The set's log-probability against the sum over every ordering (brute force), the distribution's mass,
Gumbel-top-K sampling frequencies, gradients, permutation equivariance, PPO/A2C training through
train_agent.py, save / load / deploy at another N, and the errors.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

import fedsel_env  # noqa: F401
from agents.plackett_luce import PlackettLucePolicy, PlackettLuceTopK, set_log_prob
from fedsel_env.env import FedSelectEnv


def brute_log_prob(logits, members, available):
    """log Σ over the orderings of S of Π softmax draws without replacement (the definition)."""
    total = 0.0
    for order in itertools.permutations(members):
        left, p = set(available), 1.0
        for i in order:
            p *= math.exp(logits[i]) / sum(math.exp(logits[j]) for j in left)
            left.remove(i)
        total += p
    return math.log(total)


@pytest.mark.parametrize("scale", [0.1, 1.0, 4.0, 15.0])
def test_set_log_prob_equals_the_sum_over_orderings(scale):
    g = np.random.default_rng(int(scale * 10))
    for _ in range(40):
        n = int(g.integers(2, 8))
        logits = g.normal(size=n) * scale
        mask = g.random(n) < 0.8
        mask[int(g.integers(n))] = True
        avail = np.flatnonzero(mask).tolist()
        k = int(g.integers(1, len(avail) + 1))
        members = g.choice(avail, size=k, replace=False).tolist()
        chosen = np.zeros(n, bool)
        chosen[members] = True
        got = float(set_log_prob(th.tensor(logits)[None], th.tensor(chosen)[None], th.tensor(mask)[None])[0])
        assert got == pytest.approx(brute_log_prob(logits.tolist(), members, avail), abs=1e-8)


def test_a_batch_of_sets_of_different_sizes_is_each_rows_own_log_prob():
    """The integrand runs over the members only (gathered, padded to the batch's largest set): a row's value in a
    batch of sets of 0 to N members equals the brute force and the row computed alone."""
    g = np.random.default_rng(11)
    n = 7
    logits = th.tensor(g.normal(size=(8, n)) * 2.0)
    mask = th.tensor(g.random((8, n)) < 0.85)
    mask[:, 0] = True
    chosen = th.zeros(8, n, dtype=th.bool)
    for r in range(8):
        avail = np.flatnonzero(mask[r].numpy())
        chosen[r, g.choice(avail, size=min(r, len(avail)), replace=False)] = True
    batch = set_log_prob(logits, chosen, mask)
    assert th.allclose(batch, set_log_prob(logits, chosen, mask, members_only=False), rtol=0, atol=1e-12)
    for r in range(8):
        members, avail = np.flatnonzero(chosen[r].numpy()).tolist(), np.flatnonzero(mask[r].numpy()).tolist()
        want = brute_log_prob(logits[r].tolist(), members, avail) if members else 0.0
        assert float(batch[r]) == pytest.approx(want, abs=1e-8)
        assert float(batch[r]) == pytest.approx(float(set_log_prob(logits[r:r + 1], chosen[r:r + 1], mask[r:r + 1])[0]),
                                                abs=1e-12)


def test_the_sets_probabilities_sum_to_one():
    g = np.random.default_rng(3)
    n, k = 7, 3
    logits = th.tensor(g.normal(size=n) * 2.0)
    sets = list(itertools.combinations(range(n), k))
    chosen = th.zeros(len(sets), n, dtype=th.bool)
    for r, s in enumerate(sets):
        chosen[r, list(s)] = True
    lp = set_log_prob(logits.expand(len(sets), n), chosen, th.ones(len(sets), n, dtype=th.bool))
    assert float(lp.exp().sum()) == pytest.approx(1.0, abs=1e-9)


def test_gumbel_top_k_samples_follow_the_set_probabilities():
    logits = th.tensor([[1.5, 0.0, -1.0, 0.5, 2.0]])
    mask = th.tensor([[True, True, True, False, True]])  # client 3 unavailable: never drawn
    dist = PlackettLuceTopK(logits.expand(20000, 5), mask.expand(20000, 5), k=2)
    actions = dist.sample(generator=th.Generator().manual_seed(0))
    assert bool(((actions > 0).sum(dim=1) == 2).all()) and not bool((actions[:, 3] > 0).any())
    counts = {}
    for row in (actions > 0).numpy():
        key = tuple(np.flatnonzero(row))
        counts[key] = counts.get(key, 0) + 1
    for key, c in counts.items():
        chosen = th.zeros(1, 5, dtype=th.bool)
        chosen[0, list(key)] = True
        p = float(set_log_prob(logits, chosen, mask).exp()[0])
        assert c / 20000 == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / 20000) + 1e-3)


def test_fewer_available_than_k_takes_them_all_with_probability_one():
    logits = th.tensor([[0.3, -2.0, 1.0, 0.0]])
    mask = th.tensor([[False, True, False, True]])
    dist = PlackettLuceTopK(logits, mask, k=3)
    a = dist.sample()
    assert (a > 0).tolist() == [[False, True, False, True]]
    assert float(dist.log_prob(a)[0]) == 0.0
    none = PlackettLuceTopK(logits, th.zeros(1, 4, dtype=th.bool), k=2)  # nobody available: any 2 (the round is lost)
    assert int((none.mode() > 0).sum()) == 2


def test_gradients_match_finite_differences():
    g = np.random.default_rng(5)
    logits = th.tensor(g.normal(size=(3, 6)), requires_grad=True)
    chosen = th.tensor([[1, 0, 1, 0, 0, 1], [0, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]], dtype=th.bool)
    mask = th.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]], dtype=th.bool)
    assert th.autograd.gradcheck(lambda x: set_log_prob(x, chosen, mask), (logits,), eps=1e-6, atol=1e-6)
    # the gradient of log P(S) has the set's members rising and the rest falling
    lp = set_log_prob(logits, chosen, mask).sum()
    lp.backward()
    grad = logits.grad[0]
    assert bool((grad[chosen[0]] > 0).all()) and bool((grad[~chosen[0]] < 0).all())


def _obs_batch(env, seeds):
    obs = []
    for s in seeds:
        o, _ = env.reset(seed=s)
        obs.append(o)
    return {k: th.tensor(np.stack([o[k] for o in obs])) for k in obs[0]}


def test_policy_is_permutation_equivariant_and_its_log_prob_invariant():
    env = FedSelectEnv(config={"preset": "tiny", "observation": "dict", "action_mode": "topk"})
    policy = PlackettLucePolicy(env.observation_space, env.action_space, lambda _: 1e-3, hidden=16,
                                clients_per_round=env.k)
    obs = _obs_batch(env, [0, 1])
    perm = th.tensor(np.random.default_rng(0).permutation(env.num_clients))
    permuted = {"weights": th.cat([obs["weights"][:, :1], obs["weights"][:, 1:][:, perm]], dim=1),
                "clients": obs["clients"][:, perm], "progress": obs["progress"]}
    with th.no_grad():
        l, lp_ = policy.logits(obs), policy.logits(permuted)
        assert th.allclose(l[:, perm], lp_, atol=1e-5)
        assert th.allclose(policy.predict_values(obs), policy.predict_values(permuted), atol=1e-5)
        actions, _, log_prob = policy(obs)
        _, log_prob_p, _ = policy.evaluate_actions(permuted, actions[:, perm])
        assert th.allclose(log_prob, log_prob_p, atol=1e-5)
        # forward's log-probability is evaluate_actions' (PPO's ratio is 1 before any update)
        _, again, entropy = policy.evaluate_actions(obs, actions)
        assert th.allclose(log_prob, again) and th.allclose(entropy, -again)
    env.close()


def test_deterministic_action_is_the_top_k_available_logits():
    env = FedSelectEnv(config={"preset": "tiny", "observation": "dict", "action_mode": "topk"})
    policy = PlackettLucePolicy(env.observation_space, env.action_space, lambda _: 1e-3, hidden=16,
                                clients_per_round=env.k)
    obs, _ = env.reset(seed=3)
    action, _ = policy.predict(obs, deterministic=True)
    tensors = {k: th.tensor(v)[None] for k, v in obs.items()}
    with th.no_grad():
        logits = policy.logits(tensors)[0].numpy()
    avail = np.flatnonzero(env.view.available)
    best = avail[np.argsort(-logits[avail], kind="stable")[: env.k]]
    assert sorted(np.flatnonzero(action > 0)) == sorted(best)
    assert env.action_space.contains(action.astype(np.float32))
    env.close()


def test_bad_settings_are_named():
    env = FedSelectEnv(config={"preset": "tiny", "observation": "dict", "action_mode": "topk"})
    with pytest.raises(ValueError, match="clients_per_round"):
        PlackettLucePolicy(env.observation_space, env.action_space, lambda _: 1e-3)
    with pytest.raises(ValueError, match="'topk' mode"):
        PlackettLucePolicy(env.observation_space, spaces.Discrete(4), lambda _: 1e-3, clients_per_round=2)
    with pytest.raises(ValueError, match="hidden"):
        PlackettLucePolicy(env.observation_space, env.action_space, lambda _: 1e-3, hidden=-1, clients_per_round=2)
    with pytest.raises(ValueError, match="k = 0"):
        PlackettLuceTopK(th.zeros(1, 3), th.ones(1, 3, dtype=th.bool), k=0)
    env.close()


@pytest.mark.parametrize("algo", ["pl_ppo", "pl_a2c"])
def test_trains_saves_and_deploys_at_another_n(tmp_path, algo):
    import train_agent
    from agents.deploy import deploy
    from fedsel_eval.episodes import run_episode

    run = train_agent.main(["--algo", algo, "--env", "fedsel/FedSelect-Tiny-v0", "--n-timesteps", "64",
                            "--runs-dir", str(tmp_path), "--name", "r", "--no-progress-bar", "--seed", "0",
                            "--eval-freq", "1000000"])
    assert (run / "model.zip").is_file()
    # any N at deployment: the same weights on a federation of another size, as top-K logits
    for n in (6, 14):
        env = FedSelectEnv(config={"preset": "tiny", "num_clients": n, "observation": "dict", "action_mode": "topk",
                                   "pca_components": 3})
        agent = deploy(run, env.selection_spec)
        record = run_episode(env, agent, 11)
        assert record["metrics"]["rounds"] >= 1
        assert all(len(s) <= env.k for s in record["curves"]["selected"])
        env.close()


def test_sampled_deployment_draws_sets_and_is_refused_for_other_models(tmp_path):
    import train_agent
    from agents.per_client import PerClientAgent

    run = train_agent.main(["--algo", "pl_ppo", "--env", "fedsel/FedSelect-Tiny-v0", "--n-timesteps", "64",
                            "--runs-dir", str(tmp_path), "--name", "r", "--no-progress-bar", "--seed", "0",
                            "--eval-freq", "1000000"])
    env = FedSelectEnv(config={"preset": "tiny", "observation": "dict", "action_mode": "topk", "pca_components": 3})
    obs, _ = env.reset(seed=2)
    det = PerClientAgent(env.selection_spec, seed=0, model_path=str(run / "model.zip"))
    picks = {tuple(sorted(PerClientAgent(env.selection_spec, seed=s, model_path=str(run / "model.zip"),
                                         sample=True).select(obs))) for s in range(12)}
    assert len(picks) > 1  # a distribution over sets, seeded by the agent's seed
    again = PerClientAgent(env.selection_spec, seed=3, model_path=str(run / "model.zip"), sample=True)
    same = PerClientAgent(env.selection_spec, seed=3, model_path=str(run / "model.zip"), sample=True)
    assert list(again.select(obs)) == list(same.select(obs))
    assert len(det.select(obs)) == env.k
    with pytest.raises(ValueError, match="sample"):
        PerClientAgent(env.selection_spec, model_path=str(run / "model.zip"), sample="yes")
    ppo = train_agent.main(["--algo", "pc_ppo", "--env", "fedsel/FedSelect-Tiny-v0", "--n-timesteps", "64",
                            "--runs-dir", str(tmp_path), "--name", "p", "--no-progress-bar", "--seed", "0",
                            "--eval-freq", "1000000"])
    with pytest.raises(ValueError, match="Plackett-Luce"):
        PerClientAgent(env.selection_spec, model_path=str(ppo / "model.zip"), sample=True).select(obs)
    env.close()
