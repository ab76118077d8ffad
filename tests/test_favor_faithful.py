"""FAVOR as the paper defines it (issue #17, docs/SPEC.md §2, §4): the weight state, K-Center, Power-of-Choice."""
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


# ------------------------------------------------------------------ K-Center (FAVOR's)
def clustered_obs(spec, rng, available=None):
    """10 well-separated clusters of 10 clients in the weight rows (client k in cluster k // 10)."""
    from fedsel_env.spec import CLIENT_FEATURES, FEATURE_INDEX

    n, d = spec.num_clients, spec.pca_components
    centres = rng.normal(scale=100.0, size=(10, d))
    weights = np.vstack([np.zeros((1, d)), centres[np.arange(n) // 10] + rng.normal(scale=0.1, size=(n, d))])
    clients = np.zeros((n, len(CLIENT_FEATURES)), dtype=np.float32)
    clients[:, FEATURE_INDEX["available"]] = 1.0 if available is None else available
    clients[:, FEATURE_INDEX["num_samples"]] = 1.0
    return {"weights": weights.astype(np.float32), "clients": clients, "progress": np.zeros(2, np.float32)}


def cluster_spec():
    from fedsel_env.spec import SelectionSpec

    return SelectionSpec(num_clients=100, clients_per_round=10, action_mode="subset",
                         num_samples=np.full(100, 600), max_rounds=100, pca_components=20, model_bytes=4000)


def clusters_per_round(name, rounds=10, seed=0):
    spec = cluster_spec()
    rng = np.random.default_rng(seed)
    obs = clustered_obs(spec, rng)
    agent = agents.make(name, spec, seed=seed)
    agent.reset(obs)
    return [len(set((agent.select(obs) // 10).tolist())) for _ in range(rounds)]


def test_kcenter_draws_one_device_from_each_of_k_groups():
    """FAVOR's K-Center on 10 well-separated clusters of 10, K = 10: every round covers all 10 clusters."""
    for seed in range(3):
        assert clusters_per_round("kcenter", seed=seed) == [10] * 10


def test_kcenter_cover_is_a_different_method():
    """The greedy farthest-point cover does not keep one device per cluster after its first round."""
    covered = [c for seed in range(3) for c in clusters_per_round("kcenter_cover", seed=seed)[1:]]
    assert min(covered) < 10


def test_kcenter_fills_a_group_with_nobody_available_from_the_others():
    spec = cluster_spec()
    rng = np.random.default_rng(1)
    agent = agents.make("kcenter", spec, seed=1)
    agent.reset(clustered_obs(spec, rng))
    available = np.ones(100)
    available[:10] = 0.0  # cluster 0 is away
    chosen = agent.select(clustered_obs(spec, np.random.default_rng(1), available=available))
    assert chosen.size == 10 and len(set(chosen.tolist())) == 10 and not np.any(chosen < 10)
    assert len(set((chosen // 10).tolist())) == 9  # one from each present cluster, one extra


# ------------------------------------------------------------------ Power-of-Choice
def test_pow_d_queries_the_candidates_current_loss_and_counts_it():
    env = FedSelectEnv(preset="tiny", config={"system": {"availability": 1.0}})
    agent = agents.make("pow_d", env.selection_spec, seed=0, d=6)
    agent.bind(env)
    obs, _ = env.reset(seed=0)
    obs, *_, info = env.step(agent.predict(obs)[0])
    assert info["loss_queries"] == 6
    # the candidates' losses are the global model's on their data now, not the stale observation's
    cand = agent.last_candidates
    fresh, _ = env.federation.global_losses(cand)
    np.testing.assert_allclose(env.query_losses(cand), fresh)
    stale = obs["clients"][cand, env.selection_spec.client_features.index("loss")]
    assert not np.allclose(stale, fresh)
    chosen = np.argsort(-agent.predict(obs)[0])[:env.k]
    np.testing.assert_array_equal(np.sort(chosen), np.sort(agent.last_candidates[
        np.argsort(-env.query_losses(agent.last_candidates), kind="stable")[:env.k]]))


def test_pow_d_unbound_says_how_to_bind_and_rpow_d_asks_nothing():
    env = FedSelectEnv(preset="tiny")
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="bind it to the env"):
        agents.make("pow_d", env.selection_spec, seed=0).predict(obs)
    rpow = agents.make("rpow_d", env.selection_spec, seed=0)
    obs, *_, info = env.step(rpow.predict(obs)[0])
    assert info["loss_queries"] == 0


def test_query_losses_refuses_unavailable_or_repeated_clients():
    env = FedSelectEnv(preset="tiny", config={"system": {"availability": 0.5}})
    env.reset(seed=2)
    away = np.flatnonzero(~env.view.available)
    assert away.size
    with pytest.raises(ValueError, match="available"):
        env.query_losses(away[:1])
    here = np.flatnonzero(env.view.available)
    with pytest.raises(ValueError, match="distinct"):
        env.query_losses(np.array([here[0], here[0]]))


# ------------------------------------------------------------------ FedMGDA+'s default step schedule
def test_fedmgda_decays_its_global_step_by_default_as_the_authors_scripts():
    """docs/SPEC.md §3.5: η_t = 1.0 · 0.89^⌊t/100⌋ by default (watml/Fed-MGDA's batch-10 FedMGDA+ runs)."""
    from fedsel_env.sim.aggregators import make_aggregator

    agg = make_aggregator("fedmgda+", {})
    assert [agg.step_size(t) for t in (0, 99, 100, 250)] == pytest.approx([1.0, 1.0, 0.89, 0.89 ** 2])
    assert make_aggregator("fedmgda+", {"decay": 1.0}).step_size(1000) == 1.0
