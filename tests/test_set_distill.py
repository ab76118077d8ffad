"""set_distill (issue #29): the set value, its greedy maximiser, the ranking loss, the DAgger trainer, deployment."""
from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch as th

import agents
from agents.set_distill import (SetDistillAgent, SetScorer, candidate_members, greedy_set, load_model,
                                observation_space_for, pair_distances, save_model)
from agents.training.set_distill import DistillConfig, RoundBuffer, check_training_seeds, ranking_loss, train
from fedsel_env.env import FedSelectEnv
from fedsel_env.spec import CLIENT_FEATURES

ROOT = Path(__file__).resolve().parents[1]
N, D, K = 6, 3, 3


def _obs(rng, n=N, d=D):
    clients = rng.random((n, len(CLIENT_FEATURES))).astype(np.float32)
    clients[:, CLIENT_FEATURES.index("available")] = 1.0
    return {"weights": rng.normal(size=(n + 1, d)).astype(np.float32), "clients": clients,
            "progress": np.array([0.2, 0.5], dtype=np.float32)}


def _batch(obs_list):
    return {k: th.as_tensor(np.stack([o[k] for o in obs_list])) for k in ("weights", "clients", "progress")}


def test_set_value_is_the_sum_of_scores_plus_w_times_the_mean_pair_distance():
    th.manual_seed(0)
    rng = np.random.default_rng(0)
    obs = _obs(rng)
    model = SetScorer(observation_space_for(N, D, len(CLIENT_FEATURES)), hidden=8)
    with th.no_grad():
        model.div_weight.fill_(0.7)
        t = _batch([obs])
        s = model(t)[0].numpy()
        dist = pair_distances(t["weights"])[0].numpy()
        sets = [[0, 1, 2], [1, 4], [5, 3, 0]]
        v = model.set_values(t, th.as_tensor(candidate_members(sets, N))[None], K)[0].numpy()
    rows = obs["weights"][1:].astype(np.float64)
    raw = np.linalg.norm(rows[:, None] - rows[None], axis=2)
    assert np.allclose(dist, raw / (raw.sum() / (N * (N - 1))), atol=1e-5)
    for got, c in zip(v, sets):
        pairs = sum(dist[i, j] for i, j in itertools.combinations(c, 2))
        assert got == pytest.approx(s[c].sum() + 0.7 * pairs / math.comb(K, 2), abs=1e-5)


def test_greedy_is_the_top_k_without_diversity_and_spreads_out_with_it():
    rng = np.random.default_rng(1)
    s = rng.normal(size=N)
    dist = rng.random((N, N))
    dist = dist + dist.T
    np.fill_diagonal(dist, 0)
    avail = np.array([0, 1, 2, 4, 5])
    top = greedy_set(s, dist, 0.0, avail, K)
    assert set(top) == set(avail[np.argsort(-s[avail])[:K]])
    best = max(itertools.combinations(avail, K), key=lambda c: s[list(c)].sum())
    assert set(top) == set(best)
    assert 3 not in greedy_set(s, dist, 5.0, avail, K)          # never an unavailable client
    # two clients far from each other and from nobody else: a large w picks them together
    d2 = np.ones((4, 4)) - np.eye(4)
    d2[0, 3] = d2[3, 0] = 10.0
    assert set(greedy_set(np.array([1.0, 0.9, 0.8, 0.0]), d2, 0.0, np.arange(4), 2)) == {0, 1}
    assert set(greedy_set(np.array([1.0, 0.9, 0.8, 0.0]), d2, 5.0, np.arange(4), 2)) == {0, 3}
    assert greedy_set(s, dist, 1.0, np.array([2]), K).tolist() == [2]    # fewer available than K


def test_the_ranking_loss_learns_what_makes_a_candidate_good():
    """Candidates score by their clients' sample counts: after training, the scores rank clients by them."""
    from scipy.stats import spearmanr

    th.manual_seed(0)
    rng = np.random.default_rng(2)
    col = CLIENT_FEATURES.index("num_samples")
    model = SetScorer(observation_space_for(N, D, len(CLIENT_FEATURES)), hidden=16)
    buf = RoundBuffer(1000)
    for _ in range(64):
        obs = _obs(rng)
        sets = [rng.choice(N, size=K, replace=False) for _ in range(6)]
        y = np.array([obs["clients"][c, col].sum() for c in sets], dtype=np.float32)
        buf.add([{**obs, "members": candidate_members(sets, N), "scores": y}])
    opt = th.optim.Adam(model.parameters(), lr=3e-3)
    first = float(ranking_loss(model, buf.batch(np.random.default_rng(0), 64), K))
    for i in range(120):
        loss = ranking_loss(model, buf.batch(np.random.default_rng(i), 32), K)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(ranking_loss(model, buf.batch(np.random.default_rng(0), 64), K)) < 0.6 * first
    with th.no_grad():
        rho = [spearmanr(model(_batch([o]))[0].numpy(), o["clients"][:, col])[0] for o in (_obs(rng) for _ in range(20))]
    assert np.mean(rho) > 0.7


def test_no_pair_no_loss_and_ties_do_not_count():
    model = SetScorer(observation_space_for(N, D, len(CLIENT_FEATURES)), hidden=8)
    buf = RoundBuffer(10)
    rng = np.random.default_rng(3)
    buf.add([{**_obs(rng), "members": candidate_members([[0, 1], [2, 3]], N), "scores": np.array([0.5, 0.5], np.float32)}])
    assert float(ranking_loss(model, buf.batch(rng, 1), K)) == 0.0


def _tiny_cfg(**kw):
    base = dict(scenario="Churn", seed=0, episodes=2, candidates=3, hidden=8, beta_episodes=1, eval_every=2,
                eval_seeds=[100], env_overrides={"max_rounds": 3})
    base.update(kw)
    return DistillConfig(**base)


def _curve(model, cfg):
    """The learning curve's evaluation as experiments/bench_learned.py plays it (through fedsel_eval)."""
    from fedsel_env.bench import episode_objective, scenario
    from fedsel_eval.episodes import run_episode

    env = FedSelectEnv(config=cfg.env_config())
    try:
        return [episode_objective(scenario(cfg.scenario), run_episode(
            env, None, s, make_policy=lambda spec: SetDistillAgent(spec, model=model)))[0] for s in cfg.eval_seeds]
    finally:
        env.close()


def _weights(folder):
    return {k: v.numpy() for k, v in th.load(folder / "set_distill.pt", weights_only=True).items()}


def test_training_is_deterministic_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    cfg = _tiny_cfg(episodes=3)
    a = train(cfg, tmp_path / "a", log=lambda _l: None, evaluate=_curve)
    b = train(cfg, tmp_path / "b", log=lambda _l: None, deadline=-1)   # stops before the first episode
    assert b["episodes_done"] == 0 and not b["complete"]
    part = train(cfg, tmp_path / "b", log=lambda _l: None, stop_after=1, evaluate=_curve)   # interrupted after one episode
    assert part["episodes_done"] == 1
    done = train(cfg, tmp_path / "b", log=lambda _l: None, evaluate=_curve)
    assert a["complete"] and done["complete"] and a["env_rounds"] == done["env_rounds"]
    wa, wb = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    pa = [json.loads(x) for x in (tmp_path / "a" / "progress.jsonl").read_text().splitlines()]
    pb = [json.loads(x) for x in (tmp_path / "b" / "progress.jsonl").read_text().splitlines()]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
    assert strip(pa) == strip(pb) and pa[-1]["eval_values"]
    meta = json.loads((tmp_path / "a" / "set_distill.json").read_text())
    assert meta["pca_components"] == wa["encoder.phi.0.weight"].shape[1] - 1 - len(CLIENT_FEATURES) - 5


def test_a_folder_of_another_config_is_refused(tmp_path):
    train(_tiny_cfg(episodes=1), tmp_path, log=lambda _l: None)
    with pytest.raises(ValueError, match="another config"):
        train(_tiny_cfg(episodes=1, lr=0.5), tmp_path, log=lambda _l: None)


@pytest.mark.parametrize("kw, match", [({"episodes": 0}, "episodes = 0"), ({"lr": -1.0}, "lr = -1.0"),
                                        ({"scenario": "Nope"}, "unknown bench scenario"),
                                        ({"eval_seeds": [9000]}, "reporting seeds"), ({"seed": -1}, "seed = -1")])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        _tiny_cfg(**kw)


def test_training_never_plays_a_bench_federation():
    check_training_seeds(_tiny_cfg(episodes=300, seed=2))


def test_the_trained_model_deploys_through_the_registry_and_fedsel_eval(tmp_path):
    from fedsel_eval.episodes import run_episode

    train(_tiny_cfg(episodes=1), tmp_path / "m", log=lambda _l: None)
    env = FedSelectEnv(config={**_tiny_cfg().env_config(), "max_rounds": 3})
    rec = run_episode(env, None, 100, make_policy=lambda spec: agents.make("set_distill", spec, model=str(tmp_path / "m")))
    assert rec["metrics"]["rounds"] == 3
    for sel in rec["curves"]["selected"]:
        assert 1 <= len(sel) <= 5
    with pytest.raises(ValueError, match="needs a trained model"):
        agents.make("set_distill", env.selection_spec)
    with pytest.raises(ValueError, match="holds no set_distill model"):
        agents.make("set_distill", env.selection_spec, model=str(tmp_path / "nothing"))
    with pytest.raises(ValueError, match="set the env's pca_components to"):
        load_model(tmp_path / "m", observation_space_for(40, 7, len(CLIENT_FEATURES)))
    env.close()


def test_a_model_runs_at_another_n(tmp_path):
    model = SetScorer(observation_space_for(N, D, len(CLIENT_FEATURES)), hidden=8)
    save_model(model, tmp_path, {"pca_components": D, "n_features": len(CLIENT_FEATURES), "hidden": 8})
    big, _ = load_model(tmp_path, observation_space_for(3 * N, D, len(CLIENT_FEATURES)))
    rng = np.random.default_rng(4)
    assert big(_batch([_obs(rng, n=3 * N)])).shape == (1, 3 * N)


@pytest.mark.slow
def test_bench_learned_smoke_writes_a_recomputable_record(tmp_path):
    out = tmp_path / "smoke"
    r = subprocess.run([sys.executable, str(ROOT / "experiments" / "bench_learned.py"), "--smoke", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    from fedsel_eval import records

    doc = records.load(out / "record.json")
    (entry,) = doc["notes"]["leaderboard"]
    assert entry["learned"] is True and len(entry["delta_vs_best_heuristic_ci"]) == 2
    for s in doc["summaries"]:
        assert records.same(s["value"], records.compute(s, doc["rows"])), s["name"]


# ---------------------------------------------------------------------------------- the cover-aware variant
def _cover_obs(points, available, selected_last):
    n = points.shape[0]
    clients = np.zeros((n, len(CLIENT_FEATURES)), dtype=np.float32)
    clients[:, CLIENT_FEATURES.index("available")] = available
    clients[:, CLIENT_FEATURES.index("selected_last_round")] = selected_last
    weights = np.vstack([np.zeros((1, points.shape[1])), points]).astype(np.float32)
    return {"weights": weights, "clients": clients, "progress": np.array([0.0, 0.0], dtype=np.float32)}


def test_the_cover_tracker_follows_kcenter_cover_from_the_actual_selections():
    """Played with kcenter_cover's own picks, the tracker's pick column is kcenter_cover's choice every round
    (availability varying, covers completing); its other columns say who is in the cover and how far each
    client is from it."""
    from agents.kcenter_cover import KCenterCoverAgent
    from agents.set_distill import CoverTracker
    from fedsel_env.spec import SelectionSpec

    rng = np.random.default_rng(0)
    n, k = 9, 2
    points = rng.normal(size=(n, 3))
    spec = SelectionSpec(num_clients=n, clients_per_round=k, action_mode="topk", num_samples=np.ones(n),
                         max_rounds=20, pca_components=3, model_bytes=4)
    heuristic, tracker = KCenterCoverAgent(spec), CoverTracker(k, spec)
    last = np.zeros(n, dtype=np.float32)
    for t in range(12):
        available = (rng.random(n) < 0.8).astype(np.float32)
        obs = _cover_obs(points, available, last)
        tracker.observe(obs)
        feats = tracker.features(obs)
        assert feats.shape == (n, 3)
        picked = heuristic.select(obs)
        assert set(np.flatnonzero(feats[:, 2] > 0.5)) == set(picked.tolist()), t
        in_cover = feats[:, 0] > 0.5
        if in_cover.any():
            assert np.all(feats[in_cover, 1] == 0.0) and np.all(feats[~in_cover, 1] > 0.0)
        last = np.zeros(n, dtype=np.float32)
        last[picked] = 1.0
    aug = tracker.augment(obs)
    assert aug["clients"].shape == (n, len(CLIENT_FEATURES) + 3) and aug["weights"] is obs["weights"]


def test_a_cover_aware_run_trains_saves_and_deploys(tmp_path):
    from fedsel_eval.episodes import run_episode

    cfg = _tiny_cfg(episodes=2, cover_features=True)
    summary = train(cfg, tmp_path / "m", log=lambda _l: None)
    assert summary["complete"]
    conf = json.loads((tmp_path / "m" / "config.json").read_text())
    meta = json.loads((tmp_path / "m" / "set_distill.json").read_text())
    assert conf["cover_features"] is True and meta["cover_features"] is True and meta["design"] == "set_distill_cover"
    shard = np.load(tmp_path / "m" / "data" / "ep00000.npz")
    assert shard["0_clients"].shape[1] == len(CLIENT_FEATURES) + 3  # the stored inputs carry the cover columns
    env = FedSelectEnv(config={**cfg.env_config(), "max_rounds": 3})
    agent_of = lambda spec: agents.make("set_distill", spec, model=str(tmp_path / "m"))  # noqa: E731
    rec = run_episode(env, None, 100, make_policy=agent_of)
    again = run_episode(env, None, 100, make_policy=agent_of)
    assert rec["curves"]["selected"] == again["curves"]["selected"]  # the tracker restarts with each episode
    env.close()
    plain = tmp_path / "plain"
    train(_tiny_cfg(episodes=1), plain, log=lambda _l: None)
    assert "cover_features" not in json.loads((plain / "config.json").read_text())  # old runs resume unchanged
