"""The per-client selector (issue #19): equivariance, any N, masking, both SB3 forms, save/load."""
from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO

import agents
from agents.favor import DoubleDQN
from agents.per_client_net import (PerClientActorCriticPolicy, PerClientDQNPolicy, client_tokens,
                                   per_client_scores)
from fedsel_env.env import FedSelectEnv
from fedsel_env.spec import FEATURE_INDEX

D = 3  # PCA width: fixed across N (the only size the network depends on)


def env_of(n: int, mode: str, **extra) -> FedSelectEnv:
    cfg = {"num_clients": n, "clients_per_round": 3, "max_rounds": 4, "model": "logreg", "samples_per_client": 20,
           "target_accuracy": 0.99, "action_mode": mode, "observation": "dict", "pca_components": D, **extra}
    return FedSelectEnv(config=cfg)


def permuted(obs, perm):
    out = dict(obs)
    out["weights"] = np.concatenate([obs["weights"][:1], obs["weights"][1:][perm]])
    out["clients"] = obs["clients"][perm]
    return out


@pytest.fixture(scope="module")
def models():
    """An untrained PPO and a few-step Double DQN, both per-client, on N = 6."""
    ppo_env, dqn_env = env_of(6, "topk"), env_of(6, "one", one_mode_step="1/K")
    ppo = PPO(PerClientActorCriticPolicy, ppo_env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")
    dqn = DoubleDQN(PerClientDQNPolicy, dqn_env, learning_starts=4, buffer_size=64, batch_size=4, seed=0,
                    device="cpu", train_freq=1)
    ppo.learn(8)
    dqn.learn(12)
    yield ppo, dqn
    ppo_env.close()
    dqn_env.close()


def test_permuting_the_clients_permutes_the_scores(models):
    env = env_of(6, "topk")
    obs, _ = env.reset(seed=3)
    obs, *_ = env.step(np.linspace(-1, 1, 6).astype(np.float32))  # a round played: features differ per client
    perm = np.random.default_rng(0).permutation(6)
    for model in models:
        s, s_perm = per_client_scores(model, obs), per_client_scores(model, permuted(obs, perm))
        np.testing.assert_allclose(s_perm, s[perm], rtol=1e-5, atol=1e-6)
        assert np.ptp(s) > 0  # not a constant: the test could fail
    env.close()


def test_tokens_are_finite_and_do_not_depend_on_the_pca_scale():
    env = env_of(6, "topk")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(np.linspace(-1, 1, 6).astype(np.float32))
    t = client_tokens({k: th.as_tensor(v)[None] for k, v in obs.items()})
    assert t.shape == (1, 6, D + 1 + 12 + 5) and th.isfinite(t).all()
    # the weight part is relative to the set's spread: scaling every PCA row leaves the tokens as they are
    scaled = {**obs, "weights": obs["weights"] * 7.0 + 3.0}
    t2 = client_tokens({k: th.as_tensor(v)[None] for k, v in scaled.items()})
    th.testing.assert_close(t2, t, rtol=1e-4, atol=1e-5)
    env.close()


def test_trained_at_small_n_runs_at_large_n(models, tmp_path):
    for i, model in enumerate(models):
        path = tmp_path / f"m{i}.zip"
        model.save(path)
        big = env_of(30, "topk", system={"availability": 0.5})
        obs, _ = big.reset(seed=1)
        agent = agents.make("per_client", big.selection_spec, model_path=path)
        for _ in range(3):
            action, _ = agent.predict(obs)
            avail = obs["clients"][:, FEATURE_INDEX["available"]] > 0.5
            picked = big.action_mode.decode(action, avail)
            chosen = agent.select(obs)
            assert len(chosen) == min(3, avail.sum())
            assert avail[chosen].all(), "a masked (unavailable) client was picked"
            assert set(chosen) == set(picked)
            obs, _, term, trunc, _ = big.step(action)
            if term or trunc:
                break
        assert agent.scores(obs).shape == (30,)
        big.close()


def test_the_greedy_q_action_skips_unavailable_clients(models):
    _, dqn = models
    env = env_of(6, "one", system={"availability": 0.5})
    obs, _ = env.reset(seed=5)
    q = per_client_scores(dqn, obs)
    avail = obs["clients"][:, FEATURE_INDEX["available"]] > 0.5
    assert 0 < avail.sum() < 6
    # make an unavailable client the best by Q: the greedy action must still be available
    action, _ = dqn.predict(obs, deterministic=True)
    assert avail[int(action)]
    assert int(action) == np.flatnonzero(avail)[np.argmax(q[avail])]
    env.close()


def test_wrong_action_space_is_refused():
    env = env_of(6, "one")
    with pytest.raises(ValueError, match="topk"):
        PPO(PerClientActorCriticPolicy, env, n_steps=8, batch_size=8, device="cpu")
    env.close()
    env = env_of(6, "topk")
    with pytest.raises(AssertionError, match="Discrete"):  # SB3's DQN refuses it before the policy is built
        DoubleDQN(PerClientDQNPolicy, env, device="cpu")
    env.close()


def test_flat_observation_is_refused():
    env = env_of(6, "topk")
    env.close()
    flat = FedSelectEnv(config={"num_clients": 6, "clients_per_round": 3, "max_rounds": 4, "model": "logreg",
                                "samples_per_client": 20, "action_mode": "topk", "observation": "flat"})
    with pytest.raises(ValueError, match="observation: dict"):
        PPO(PerClientActorCriticPolicy, flat, n_steps=8, batch_size=8, device="cpu")
    flat.close()


def test_a_flat_favor_model_is_not_a_per_client_model(tmp_path):
    env = FedSelectEnv(config={"num_clients": 6, "clients_per_round": 3, "max_rounds": 4, "model": "logreg",
                               "samples_per_client": 20, "action_mode": "one", "observation": "flat"})
    m = DoubleDQN("MlpPolicy", env, learning_starts=1, buffer_size=16, device="cpu")
    m.save(tmp_path / "flat.zip")
    spec_env = env_of(6, "topk")
    spec_env.reset(seed=0)
    agent = agents.make("per_client", spec_env.selection_spec, model_path=tmp_path / "flat.zip")
    obs, _ = spec_env.reset(seed=0)
    with pytest.raises(ValueError, match="not trained with a per-client policy"):
        agent.select(obs)
    env.close()
    spec_env.close()


@pytest.mark.parametrize("algo", ["pc_ppo", "pc_dqn"])
def test_train_agent_trains_it_and_evaluate_runs_it_at_another_n(algo, tmp_path):
    """train_agent.py --algo pc_ppo | pc_dqn on tiny (configs/pc_*.yml), then evaluate.py on N = 12."""
    import evaluate
    import train_agent

    short = ["learning_starts=16", "batch_size=16"] if algo == "pc_dqn" else ["n_steps=32", "batch_size=16"]
    train_agent.main(["--algo", algo, "--env", "tiny", "-n", "64", "-f", str(tmp_path), "--name", "m",
                      "--eval-freq", "0", "--no-progress-bar", "--verbose", "0", "--hyperparams", *short])
    run = tmp_path / "m"
    assert (run / "model.zip").is_file()
    evaluate.main(["--env", "tiny", "--env-kwargs", "num_clients=12", "pca_components=3", "--policy", "random",
                   "--policy", f"pc={run}", "--seeds", "0", "1", "--out", str(tmp_path / "ev"), "--no-progress",
                   "--no-plots"])
    import json

    recs = [json.loads(line) for line in (tmp_path / "ev" / "episodes.jsonl").read_text().splitlines()]
    assert {r["policy"] for r in recs} == {"random", "pc"} and len(recs) == 4


def test_an_ensemble_sums_its_members_standardised_scores(models, tmp_path):
    paths = []
    for i, model in enumerate(models):
        models[i].save(tmp_path / f"m{i}.zip")
        paths.append(tmp_path / f"m{i}.zip")
    env = env_of(6, "topk", system={"availability": 0.7})
    obs, _ = env.reset(seed=2)
    spec = env.selection_spec
    ens = agents.make("per_client", spec, model_path=[str(p) for p in paths])
    single = [agents.make("per_client", spec, model_path=p) for p in paths]
    avail = np.flatnonzero(obs["clients"][:, FEATURE_INDEX["available"]] > 0.5)
    expected = sum((s - s[avail].mean()) / s[avail].std() for s in (a.scores(obs) for a in single))
    np.testing.assert_allclose(ens.scores(obs), expected, rtol=1e-6, atol=1e-9)
    assert set(ens.select(obs)) <= set(avail)
    with pytest.raises(ValueError, match="empty list"):
        agents.make("per_client", spec, model_path=[])
    env.close()


def test_a_model_of_another_pca_width_is_refused_with_the_width_to_set(models, tmp_path):
    """The network's weights depend on d (not on N): at another d the agent says which pca_components to set,
    when it is built (not a 'damaged file' error at the first selection)."""
    from agents.per_client import saved_pca_components

    wide = env_of(8, "topk", pca_components=5)
    spec = wide.selection_spec
    assert spec.pca_components == 5
    for i, model in enumerate(models):
        path = tmp_path / f"m{i}.zip"
        model.save(path)
        assert saved_pca_components(path) == D
        with pytest.raises(ValueError, match=f"reads d = {D} PCA components.*d = 5: set the config field "
                                             f"pca_components: {D}"):
            agents.make("per_client", spec, model_path=path)
        with pytest.raises(ValueError, match=f"pca_components: {D}"):
            agents.make("per_client", spec, model_path=[path])
        with pytest.raises(ValueError, match=f"live model reads d = {D}.*pca_components: {D}"):
            agents.make("per_client", spec, model=model)
    # a d = 4 model cannot run with N = 2 clients (d <= N + 1): the message says so
    d4 = env_of(6, "topk", pca_components=4)
    PPO(PerClientActorCriticPolicy, d4, n_steps=8, batch_size=8, device="cpu").save(tmp_path / "d4.zip")
    small = env_of(2, "topk", clients_per_round=1)
    assert small.selection_spec.pca_components == 3
    with pytest.raises(ValueError, match="pca_components: 4.*needs N >= 3 clients"):
        agents.make("per_client", small.selection_spec, model_path=tmp_path / "d4.zip")
    for e in (wide, d4, small):
        e.close()
