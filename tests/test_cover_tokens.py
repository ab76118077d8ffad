"""pl_ppo_cover (issue #41): cover-aware tokens for SB3 learners (agents/cover_tokens.py) and the Plackett-Luce
policy started at kcenter_cover (agents/plackett_luce.py's CoverPlackettLucePolicy)."""
from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.cover_tokens import CoverFeatures, cover_columns
from agents.kcenter_cover import KCenterCoverAgent
from agents.per_client import PerClientAgent, saved_cover_columns, saved_pca_components
from agents.plackett_luce import CoverPlackettLucePolicy, PlackettLucePolicy
from agents.set_distill import COVER_FEATURES, CoverTracker
from agents.training.batched_vec_env import BatchedVecEnv
from fedsel_env.env import FedSelectEnv
from fedsel_env.spec import CLIENT_FEATURES

CFG = {"preset": "tiny", "observation": "dict", "action_mode": "topk", "pca_components": 3, "max_rounds": 6}


def _model(venv, spec, **kw):
    return PPO(CoverPlackettLucePolicy, CoverFeatures(venv, spec), n_steps=8, batch_size=8, n_epochs=1, seed=0,
               policy_kwargs={"hidden": 8, "clients_per_round": spec.clients_per_round, **kw})


def test_untrained_policy_deploys_as_kcenter_cover_for_a_whole_episode():
    """The residual starts at zero and c at cover_prior: the K largest logits are kcenter_cover's picks, round
    after round (the deployed agent's tracker follows the clients it selected, as kcenter_cover's own state)."""
    env = FedSelectEnv(config={**CFG, "max_rounds": 12})
    spec = env.selection_spec
    model = _model(DummyVecEnv([lambda: FedSelectEnv(config=CFG)]), spec)
    learned = PerClientAgent(spec, model=model)
    cover = KCenterCoverAgent(spec)
    obs, _ = env.reset(seed=4)
    learned.reset(obs)
    cover.reset(obs)
    rounds = 0
    while True:
        a, b = learned.select(obs), cover.select(obs)
        assert sorted(a.tolist()) == sorted(b.tolist()), rounds
        obs, _, term, trunc, _ = env.step(learned.to_action(a))
        rounds += 1
        if term or trunc:
            break
    assert rounds >= 6  # past the first cover's completion (N = 10, K = 2: five rounds)
    env.close()


def _tracked(env, actions, seed):
    """The cover columns a CoverTracker gives along one env's episode under ``actions``."""
    spec = env.selection_spec
    t = CoverTracker(spec.clients_per_round, spec)
    obs, _ = env.reset(seed=seed)
    t.observe(obs)
    out = [t.features(obs)]
    for a in actions:
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
        t.observe(obs)
        out.append(t.features(obs))
    return out


def test_wrapper_columns_equal_a_tracker_on_the_batched_env_and_restart_each_episode():
    spec = FedSelectEnv(config=CFG).selection_spec
    vec = CoverFeatures(BatchedVecEnv({**CFG, "federation_seed": None}, 2), spec)
    vec.seed(5)
    obs = vec.reset()
    assert obs["clients"].shape[2] == len(CLIENT_FEATURES) + len(COVER_FEATURES)
    assert cover_columns(vec.observation_space, spec) == len(COVER_FEATURES)
    rng = np.random.default_rng(0)
    n, k = spec.num_clients, spec.clients_per_round
    seen, ended = [obs["clients"][0, :, len(CLIENT_FEATURES):].copy()], False
    for _ in range(CFG["max_rounds"] + 2):
        actions = np.full((2, n), -1.0, dtype=np.float32)
        for i in range(2):
            actions[i, rng.choice(n, k, replace=False)] = 1.0
        obs, _, dones, infos = vec.step(actions)
        if dones[0]:
            term = infos[0]["terminal_observation"]["clients"]
            assert term.shape[1] == len(CLIENT_FEATURES) + len(COVER_FEATURES)
            start = obs["clients"][0, :, len(CLIENT_FEATURES):]
            assert not start[:, 0].any()  # a new episode: nobody in the cover yet
            ended = True
            break
        seen.append(obs["clients"][0, :, len(CLIENT_FEATURES):].copy())
    assert ended
    # the in-cover column only grows within a cover, and the cover's pick marks K available clients
    for cols in seen:
        assert cols[:, 2].sum() == k
    vec.close()


def test_replay_rebuilds_the_tracker_as_the_live_run_had_it():
    """--resume replays each env's interrupted episode (agents.training.stream); the wrapper's columns after the
    replay equal those of the live run at that step."""
    from agents.training.envs import make_env_fn

    spec = FedSelectEnv(config=CFG).selection_spec
    live = CoverFeatures(DummyVecEnv([make_env_fn(CFG, 0)]), spec)
    live.seed(3)
    live.reset()
    start = live.reset_infos[0]["episode_start"]
    rng = np.random.default_rng(1)
    acts = []
    for _ in range(3):
        a = np.full((1, spec.num_clients), -1.0, dtype=np.float32)
        a[0, rng.choice(spec.num_clients, spec.clients_per_round, replace=False)] = 1.0
        acts.append(a[0])
        obs, _, _, _ = live.step(a)
    other = CoverFeatures(DummyVecEnv([make_env_fn(CFG, 0)]), spec)
    reply = other.env_method("replay_episode", start, acts, indices=[0])[0]
    assert reply["ok"], reply["why"]
    np.testing.assert_array_equal(reply["obs"]["clients"], obs["clients"][0])
    # a replay that does not report how the episode went cannot rebuild the cover: said, not guessed
    plain = CoverFeatures(DummyVecEnv([lambda: FedSelectEnv(config=CFG)]), spec)
    plain.venv.env_method = lambda *a, **k: [{"obs": reply["obs"], "ok": True, "why": ""}]
    again = plain.env_method("replay_episode", start, acts, indices=[0])[0]
    assert not again["ok"] and "first observation" in again["why"]
    plain.close()
    live.close()
    other.close()


def test_saved_model_deploys_from_its_zip_with_the_same_picks(tmp_path):
    env = FedSelectEnv(config=CFG)
    spec = env.selection_spec
    model = _model(DummyVecEnv([lambda: FedSelectEnv(config=CFG)]), spec)
    model.learn(16)
    with th.no_grad():  # a residual that is not zero, so the check is not only kcenter_cover's picks
        model.policy.mlp_extractor.score.rho[-1].weight.normal_(0.0, 1.0)
    model.save(tmp_path / "m.zip")
    assert saved_cover_columns(tmp_path / "m.zip") == len(COVER_FEATURES)
    assert saved_pca_components(tmp_path / "m.zip") == CFG["pca_components"]
    live, saved = PerClientAgent(spec, model=model), PerClientAgent(spec, model_path=str(tmp_path / "m.zip"))
    obs, _ = env.reset(seed=8)
    for agent in (live, saved):
        agent.reset(obs)
    for _ in range(4):
        a, b = live.select(obs), saved.select(obs)
        assert a.tolist() == b.tolist()
        obs, *_ = env.step(live.to_action(a))
    with pytest.raises(ValueError, match="ensemble"):
        PerClientAgent(spec, model_path=[str(tmp_path / "m.zip"), str(tmp_path / "m.zip")])
    env.close()


def test_bad_settings_are_refused_with_the_fix():
    env = FedSelectEnv(config=CFG)
    spec = env.selection_spec
    with pytest.raises(ValueError, match="cover_prior"):
        _model(DummyVecEnv([lambda: FedSelectEnv(config=CFG)]), spec, cover_prior="high")
    with pytest.raises(ValueError, match="pl_ppo_cover adds them"):  # the raw observation: no cover columns
        CoverPlackettLucePolicy(env.observation_space, env.action_space, lambda _: 1e-3, clients_per_round=2)
    with pytest.raises(ValueError, match="once"):
        CoverFeatures(CoverFeatures(DummyVecEnv([lambda: FedSelectEnv(config=CFG)]), spec), spec)
    with pytest.raises(ValueError, match="Dict observations"):
        CoverFeatures(DummyVecEnv([lambda: FedSelectEnv(config={**CFG, "observation": "flat"})]), spec)
    # the plain Plackett-Luce policy is unchanged: no cover weight, its old zips load as before
    plain = PlackettLucePolicy(env.observation_space, env.action_space, lambda _: 1e-3, clients_per_round=2)
    assert not hasattr(plain, "cover_weight") and not getattr(plain, "cover_features", False)
    env.close()


def test_train_agent_trains_and_resumes_it(tmp_path):
    """train_agent.py --algo pl_ppo_cover wraps the envs itself; a run stopped at a checkpoint and resumed gives
    the weights of the uninterrupted run (the replayed episodes' covers rebuilt)."""
    import train_agent
    from stable_baselines3.common.save_util import load_from_zip_file

    common = ["--algo", "pl_ppo_cover", "--env", "fedsel/FedSelect-Tiny-v0", "--no-progress-bar", "--seed", "0",
              "--eval-freq", "0", "--n-envs", "2", "--hyperparams", "n_steps:16", "batch_size:16",
              "--runs-dir", str(tmp_path)]
    full = train_agent.main([*common, "--name", "full", "-n", "96"])
    part = train_agent.main([*common, "--name", "part", "-n", "64", "--save-freq", "32"])
    # the stopped run goes on to 96 steps from its last checkpoint (64, mid-episode: the episodes are replayed)
    train_agent.main(["--runs-dir", str(tmp_path), "--name", "part", "--resume", "--n-timesteps", "96",
                      "--no-progress-bar"])
    a = load_from_zip_file(full / "model.zip")[1]["policy"]
    b = load_from_zip_file(part / "model.zip")[1]["policy"]
    assert a.keys() == b.keys()
    for key in a:
        assert th.equal(a[key], b[key]), key


def _expected_cover_picks(c: float, k: int, n: int) -> float:
    """Exact: the mean number of the cover's k picks (logit c) among k Plackett-Luce draws without replacement from
    n clients (the other n - k at logit 0), by a recursion over how many picks were drawn so far."""
    w = np.exp(c)
    p = {0: 1.0}  # picks drawn so far -> probability
    for d in range(k):
        nxt: dict = {}
        for m, q in p.items():
            left_picks, left_rest = k - m, n - k - (d - m)
            z = left_picks * w + left_rest
            nxt[m + 1] = nxt.get(m + 1, 0.0) + q * left_picks * w / z
            nxt[m] = nxt.get(m, 0.0) + q * left_rest / z
        p = nxt
    return sum(m * q for m, q in p.items())


def test_the_configs_cover_prior_holds_about_a_third_of_the_cover_out_of_the_samples():
    """configs/pl_ppo_cover.yml says why cover_prior is 3: at K = 5 of N = 40 the untrained policy's samples hold 3.3
    of the cover's 5 picks on average (checked exactly here, and against Gumbel-top-K draws)."""
    import yaml
    from pathlib import Path

    from agents.training.hyperparams import parse_policy_kwargs

    entry = yaml.safe_load((Path(__file__).parents[1] / "configs" / "pl_ppo_cover.yml").read_text())["default"]
    c = parse_policy_kwargs(entry["policy_kwargs"])["cover_prior"]
    exact = _expected_cover_picks(c, 5, 40)
    assert round(exact, 1) == 3.3
    rng = np.random.default_rng(0)
    logits = np.r_[np.full(5, c), np.zeros(35)]
    drawn = np.argsort(-(logits + rng.gumbel(size=(20_000, 40))), axis=1)[:, :5]
    assert abs((drawn < 5).sum(axis=1).mean() - exact) < 0.03  # 20,000 draws: standard error about 0.007
    assert _expected_cover_picks(c, 5, 5) == pytest.approx(5.0)  # K = N: every client, whatever the logits


def test_pl_ppo_cover_long_is_pl_ppo_cover_with_two_settings_changed():
    """configs/pl_ppo_cover_long.yml (the named variant of the FreeRiders probe) says it is pl_ppo_cover's default
    entry with cover_prior 1 and 98,304 rounds, every other setting unchanged; and that cover_prior 1 holds 1.3 of the
    cover's 5 picks in the untrained policy's samples (K = 5, N = 40), against 0.6 for uniform sampling."""
    import yaml
    from pathlib import Path

    from agents.training.hyperparams import parse_policy_kwargs

    configs = Path(__file__).parents[1] / "configs"
    base = yaml.safe_load((configs / "pl_ppo_cover.yml").read_text())["default"]
    long = yaml.safe_load((configs / "pl_ppo_cover_long.yml").read_text())["default"]
    assert long["n_timesteps"] == 98_304 and base["n_timesteps"] == 16_384
    kw_base, kw_long = (parse_policy_kwargs(e["policy_kwargs"]) for e in (base, long))
    assert kw_long == {**kw_base, "cover_prior": 1.0}
    assert {k: v for k, v in long.items() if k not in ("n_timesteps", "policy_kwargs")} == {
        k: v for k, v in base.items() if k not in ("n_timesteps", "policy_kwargs")}
    assert round(_expected_cover_picks(1.0, 5, 40), 1) == 1.3 and _expected_cover_picks(0.0, 5, 40) == 5 * 5 / 40
