"""set_es (issue #29): the standardised token, the linear set value, the CMA-ES trainer, deployment."""
from __future__ import annotations

import json

import numpy as np
import pytest

import agents
from agents.set_es import SetESAgent, param_names, standardise, token_names
from agents.training.set_es import (ESConfig, ESEpisode, SerialMapper, VectorMapper, candidate_values, check_training_seeds, make_search, play_episode,
                                    rank_fitness, train)
from fedsel_env.env import FedSelectEnv
from fedsel_env.spec import CLIENT_FEATURES


def test_standardise_uses_the_available_clients_and_zeroes_constant_columns():
    x = np.array([[1.0, 5.0, 0.0], [3.0, 5.0, 9.0], [5.0, 5.0, 0.0], [100.0, 1.0, 0.0]])
    avail = np.array([True, True, True, False])
    z = standardise(x, avail)
    a = x[:3, 0]
    assert np.allclose(z[:, 0], (x[:, 0] - a.mean()) / a.std())
    assert np.all(z[:, 1] == 0.0)                       # constant over the available clients
    assert np.allclose(z[:3, 2].mean(), 0.0) and np.allclose(z[:3, 2].std(), 1.0)
    assert np.all(standardise(x, np.zeros(4, dtype=bool)) == 0.0)


def test_rank_fitness_ranks_each_federation_and_averages():
    values = np.array([[10.0, 3.0], [20.0, 1.0], [10.0, 2.0]])   # 3 candidates × 2 federations
    # lower is better: federation 0 ranks (0.5, 2, 0.5), federation 1 ranks (2, 0, 1)
    assert np.allclose(rank_fitness(values, lower_is_better=True), [1.25, 1.0, 0.75])
    assert np.allclose(rank_fitness(values, lower_is_better=False), [0.75, 1.0, 1.25])


def _churn_env(**over):
    cfg = ESConfig(scenario="Churn").env_config()
    cfg.update(over)
    return FedSelectEnv(config=cfg)


def test_weights_on_the_cover_pick_alone_are_kcenter_cover():
    """The policy class holds the heuristic: θ = 1 on ``cover_pick`` (w = 0) selects what ``kcenter_cover`` does,
    round after round, on a real federation with churning availability."""
    from agents.kcenter_cover import KCenterCoverAgent

    env = _churn_env(max_rounds=12)
    obs, _ = env.reset(seed=100)
    spec = env.selection_spec
    theta = np.zeros(len(param_names(spec)))
    theta[token_names(spec).index("cover_pick")] = 1.0
    mine, cover = SetESAgent(spec, model=theta), KCenterCoverAgent(spec)
    mine.reset(obs)
    cover.reset(obs)
    done = False
    while not done:
        a, b = mine.select(obs), cover.select(obs)
        assert set(a.tolist()) == set(b.tolist())
        obs, _, term, trunc, _ = env.step(cover.to_action(b))
        done = term or trunc
    env.close()


def test_the_loss_weight_alone_picks_the_highest_stale_losses():
    env = _churn_env(max_rounds=4)
    obs, _ = env.reset(seed=101)
    spec = env.selection_spec
    weights = dict.fromkeys(param_names(spec), 0.0)
    weights["loss"] = 2.0
    agent = SetESAgent(spec, model=weights)
    agent.reset(obs)
    chosen = agent.select(obs)
    avail = agent.available(obs)
    loss = spec.feature(obs, "loss")
    assert set(chosen.tolist()) == set(avail[np.argsort(-loss[avail], kind="stable")][: spec.clients_per_round].tolist())
    env.close()


def test_bad_weights_and_folders_are_refused(tmp_path):
    env = _churn_env(max_rounds=2)
    spec = env.selection_spec
    with pytest.raises(ValueError, match="needs a trained policy"):
        agents.make("set_es", spec)
    with pytest.raises(ValueError, match="needs 16 finite weights"):
        SetESAgent(spec, model=[1.0, 2.0])
    with pytest.raises(ValueError, match="finite weights"):
        SetESAgent(spec, model=[np.nan] * 16)
    with pytest.raises(ValueError, match="lack"):
        SetESAgent(spec, model={"loss": 1.0})
    with pytest.raises(ValueError, match="holds no set_es policy"):
        SetESAgent(spec, model=str(tmp_path))
    (tmp_path / "set_es.json").write_text(json.dumps({"params": {"a": 1.0, "w": 0.0}}))
    with pytest.raises(ValueError, match="train it on this env's client features"):
        SetESAgent(spec, model=str(tmp_path))
    env.close()


def test_set_es_q_asks_its_d_highest_scored_clients_and_picks_among_them_by_the_queried_loss():
    """``set_es_q`` with θ on ``num_samples`` (stage 1: which d clients to ask) and on ``queried_loss`` (stage 2):
    each round it asks exactly the d largest available clients, through the env's counted channel, and selects the K
    of them with the highest current loss — recomputed here from the env's own answers, round by round."""
    env = _churn_env(max_rounds=6)
    obs, _ = env.reset(seed=102)
    spec = env.selection_spec
    k = spec.clients_per_round
    d = 2 * k
    names = param_names(spec, d)
    assert names[-2:] == ["queried_loss", "w"] and len(names) == len(param_names(spec)) + 1
    weights = dict.fromkeys(names, 0.0)
    weights.update(num_samples=1e-3, queried_loss=1.0)
    agent = SetESAgent(spec, model=weights, queries=d)
    agent.reset(obs)
    with pytest.raises(ValueError, match="bind it to the env first"):
        agent.select(obs)
    asked = []
    agent.bind(type("Channel", (), {"query_losses": lambda _self, ids: (asked.append(np.array(ids)),
                                                                        env.query_losses(ids))[1]})())
    done, queries = False, 0
    while not done:
        avail = agent.available(obs)
        n_k = spec.num_samples[avail]
        want = np.sort(avail[np.argsort(-n_k, kind="stable")][:d])
        before = env.tally.loss_queries
        chosen = agent.select(obs)
        assert np.array_equal(asked[-1], want) and np.array_equal(agent.last_candidates, want)
        assert env.tally.loss_queries - before == want.size
        truth = env.query_losses(want)                       # the same model: the same answers
        assert set(chosen.tolist()) == set(want[np.argsort(-truth, kind="stable")][:k].tolist())
        obs, _, term, trunc, info = env.step(agent.to_action(chosen))
        queries += 2 * want.size
        assert info["loss_queries"] == queries              # the agent's and this test's, all counted
        done = term or trunc
    env.close()


def test_set_es_q_settings_are_checked(tmp_path):
    env = _churn_env(max_rounds=2)
    spec = env.selection_spec
    k, n = spec.clients_per_round, spec.num_clients
    for bad in (1, k - 1, n + 1, True, 2.5):
        with pytest.raises(ValueError, match="queries"):
            SetESAgent(spec, model=[0.0] * 17, queries=bad)
    with pytest.raises(ValueError, match="needs 17 finite weights"):
        SetESAgent(spec, model=[0.0] * 16, queries=2 * k)
    (tmp_path / "set_es.json").write_text(json.dumps({"params": dict.fromkeys(param_names(spec, 2 * k), 0.0),
                                                      "queries": 2 * k}))
    assert SetESAgent(spec, model=str(tmp_path)).queries == 2 * k          # the policy file sets d
    with pytest.raises(ValueError, match="was trained with queries = 10"):
        SetESAgent(spec, model=str(tmp_path), queries=k)
    with pytest.raises(ValueError, match="queries"):
        ESConfig(scenario="Churn", queries=-1)
    with pytest.raises(ValueError, match="queries"):
        train(_tiny(queries=1), tmp_path / "q", log=lambda _l: None)
    env.close()


def _tiny(**kw):
    base = dict(scenario="Churn", seed=0, generations=3, episodes=2, popsize=3, eval_every=2, eval_seeds=[100],
                env_overrides={"max_rounds": 3})
    base.update(kw)
    return ESConfig(**base)


def test_training_is_deterministic_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    cfg = _tiny()
    state = np.random.get_state()
    a = train(cfg, tmp_path / "a", log=lambda _l: None)
    assert np.array_equal(np.random.get_state()[1], state[1])   # the caller's numpy generator is left alone
    b = train(cfg, tmp_path / "b", log=lambda _l: None, deadline=-1)
    assert b["generations_done"] == 0 and not b["complete"]
    np.random.seed(12345)                                        # the caller moving numpy's generator changes nothing
    assert train(cfg, tmp_path / "b", log=lambda _l: None, stop_after=1)["generations_done"] == 1
    done = train(cfg, tmp_path / "b", log=lambda _l: None)
    assert a["complete"] and done["complete"] and a["training_episodes"] == done["training_episodes"] == 3 * 3 * 2
    strip = lambda p: [{k: v for k, v in json.loads(x).items() if k != "wall_s"}  # noqa: E731
                       for x in (p / "progress.jsonl").read_text().splitlines()]
    pa, pb = strip(tmp_path / "a"), strip(tmp_path / "b")
    assert pa == pb and "eval_values" in pa[1] and "eval_values" in pa[2] and "eval_values" not in pa[0]
    pol_a = json.loads((tmp_path / "a" / "set_es.json").read_text())
    assert pol_a == json.loads((tmp_path / "b" / "set_es.json").read_text())
    assert list(pol_a["params"].values()) == pa[-1]["mean"] and pol_a["generations"] == 3


class _PicklingMapper(SerialMapper):
    """A mapper as a remote one would see the work: every task and result through pickle, each task counted."""

    def __init__(self):
        self.tasks = []

    def map(self, fn, items):
        import pickle

        self.tasks.extend(items)
        return [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(x))))) for x in items]


def test_a_generation_is_a_list_of_picklable_episodes_and_any_mapper_gives_the_same_run(tmp_path):
    """set_es's generation is E federations × P candidates of :class:`ESEpisode` tasks (plus the curve's), played
    through ``mapper.map(play_episode, tasks)``; a mapper that pickles each task and result (as Ray's does) gives the
    run of the default serial mapper bit for bit (issue #46)."""
    cfg = _tiny(generations=2)
    mapper = _PicklingMapper()
    train(cfg, tmp_path / "serial", log=lambda _l: None)
    train(cfg, tmp_path / "mapped", log=lambda _l: None, mapper=mapper)
    for f in ("set_es.json", "config.json"):
        assert (tmp_path / "serial" / f).read_bytes() == (tmp_path / "mapped" / f).read_bytes()
    train_tasks = [t for t in mapper.tasks if t.seed not in cfg.eval_seeds]
    assert len(train_tasks) == 2 * 3 * 2 and all(isinstance(t, ESEpisode) for t in mapper.tasks)   # G × P × E
    # federation by federation: the P candidates of a federation follow one another (a serial mapper builds each
    # federation's env once, which a family's federations need: fedsel_env/families.py)
    assert [t.seed for t in train_tasks[:6]] == [cfg.episode_seed(0, j) for j in range(2) for _ in range(3)]
    assert len(mapper.tasks) == 2 * 3 * 2 + len(cfg.eval_seeds)        # the curve at the end, on the tuning seeds
    t = mapper.tasks[0]
    assert play_episode(t) == play_episode(ESEpisode(**{**t.__dict__}))   # a task's result is its own seed's


@pytest.mark.parametrize("scenario,queries", [("Churn", 0), ("Churn", 10), ("FreeRiders", 0)])
def test_the_default_vector_mapper_gives_the_serial_mappers_run_bit_for_bit(tmp_path, scenario, queries):
    """The default mapper plays a generation's episodes side by side in one vector env (issue #43); the progress log
    (every candidate, fitness, objective and env round) and the policy are the one-after-another run's bit for bit,
    with set_es_q's loss queries too; a vector env of fewer slots than a generation's episodes refills them."""
    cfg = _tiny(scenario=scenario, generations=2, queries=queries, env_overrides={"max_rounds": 4})
    mapper = VectorMapper(4)
    train(cfg, tmp_path / "serial", log=lambda _l: None, mapper=SerialMapper())
    train(cfg, tmp_path / "vector", log=lambda _l: None, mapper=mapper)
    train(cfg, tmp_path / "default", log=lambda _l: None)
    strip = lambda p: [{k: v for k, v in json.loads(x).items() if k != "wall_s"}  # noqa: E731
                       for x in (p / "progress.jsonl").read_text().splitlines()]
    assert strip(tmp_path / "serial") == strip(tmp_path / "vector") == strip(tmp_path / "default")
    for f in ("set_es.json", "config.json"):
        assert (tmp_path / "serial" / f).read_bytes() == (tmp_path / "vector" / f).read_bytes()
    assert mapper._venv is not None and mapper._venv[1].num_envs == 4   # kept between generations, closed by its owner
    mapper.close()
    assert mapper._venv is None
    assert mapper.map(len, ["ab", "c"]) == [2, 1]                        # any other function: one after another
    with pytest.raises(ValueError, match="n_envs = 0 is invalid"):
        VectorMapper(0)


def test_a_candidates_logged_mean_is_its_own_rows_mean_to_the_last_digit():
    """``values_mean`` (the learning curve's best candidate in bench_learned's record) is each candidate's mean over
    its E federations as numpy takes it of that candidate's own row, whatever the order the tasks were played in
    (federation by federation): on float objectives (worst-10% accuracy, seconds) a strided mean differs in the last
    digit, and the record's rows were logged from contiguous rows."""
    rng = np.random.default_rng(3)
    per_candidate = rng.random((5, 16))                              # P = 5 candidates × E = 16 federations
    played = [per_candidate[p, j] for j in range(16) for p in range(5)]   # the mappers' order: E × P
    values = candidate_values(played, 16, 5)
    assert np.array_equal(values, per_candidate)
    assert values.mean(axis=1).tolist() == [np.array(list(row)).mean() for row in per_candidate]   # exactly
    assert values.flags.c_contiguous   # a strided (transposed) view is what numpy sums in another order


def test_a_log_that_does_not_replay_is_refused(tmp_path):
    cfg = _tiny(generations=1)
    train(cfg, tmp_path, log=lambda _l: None)
    rows = [json.loads(x) for x in (tmp_path / "progress.jsonl").read_text().splitlines()]
    rows[0]["candidates"][0][0] += 1.0
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="does not replay"):
        train(cfg, tmp_path, log=lambda _l: None)
    with pytest.raises(ValueError, match="another config"):
        train(_tiny(generations=1, episodes=3), tmp_path, log=lambda _l: None)


@pytest.mark.parametrize("kw, match", [({"generations": 0}, "generations = 0"), ({"sigma0": 0.0}, "sigma0 = 0.0"),
                                        ({"popsize": 1}, "popsize = 1"), ({"scenario": "Nope"}, "unknown bench scenario"),
                                        ({"eval_seeds": [9000]}, "reporting seeds"), ({"seed": -1}, "seed = -1"),
                                        ({"generations": 2000, "episodes": 8}, "exceeds 10,000")])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        _tiny(**kw)


def test_training_never_plays_a_bench_federation():
    for seed in (0, 1, 2):
        check_training_seeds(_tiny(generations=120, episodes=24, seed=seed))


def test_the_trained_policy_deploys_through_the_registry_and_fedsel_eval(tmp_path):
    from fedsel_eval.episodes import run_episode

    train(_tiny(generations=1), tmp_path / "m", log=lambda _l: None)
    env = _churn_env(max_rounds=3)
    rec = run_episode(env, None, 100, make_policy=lambda spec: agents.make("set_es", spec, model=str(tmp_path / "m")))
    assert rec["metrics"]["rounds"] == 3
    for sel in rec["curves"]["selected"]:
        assert 1 <= len(sel) <= 5
    assert len(CLIENT_FEATURES) + 3 + 1 == len(param_names(env.selection_spec))
    env.close()


def test_bench_learned_smoke_trains_set_es_and_writes_a_recomputable_record_and_its_curves(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from fedsel_eval import records

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "smoke"
    for design in ("set_es", "set_es_q"):
        r = subprocess.run([sys.executable, str(root / "experiments" / "bench_learned.py"), "--smoke", "--design",
                            design, "--out", str(out)], capture_output=True, text=True, cwd=root, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
    doc = records.load(out / "record.json")
    entries = {e["policy"]: e for e in doc["notes"]["leaderboard"]}
    assert set(entries) == {"set_es", "set_es_q"}
    for entry in entries.values():
        assert entry["learned"] is True and len(entry["delta_vs_best_heuristic_ci"]) == 2
    assert {r["role"] for r in doc["rows"]} >= {"learned", "curve", "training", "tuning_reference", "weights", "confirm", "fresh"}
    assert json.loads((out / "set_es_q" / "Churn" / "seed0" / "set_es.json").read_text())["queries"] == 10
    assert "| Churn | `set_es` |" in r.stdout and "| Churn | `set_es_q` |" in r.stdout  # the confirmation seeds
    assert "| `cover_pick` |" in r.stdout and "| `w` |" in r.stdout and "unit vector" in r.stdout
    assert "| `queried_loss` |" in r.stdout                                    # set_es_q's weights table
    assert "oracle's clients it also picks" in r.stdout                         # the picks beside the oracle's
    picks = [x for x in doc["rows"] if x["role"] == "picks"]
    assert {x["design"] for x in picks} == {"set_es", "set_es_q"} and len(picks) == 4   # 1 training seed × 2 seeds
    assert all(0.0 <= x["overlap"] <= 1.0 and 0.0 <= x["learned_best"] <= 1.0 for x in picks)
    for s in doc["summaries"]:
        assert records.same(s["value"], records.compute(s, doc["rows"])), s["name"]
    assert (out / "es_curves.png").stat().st_size > 10_000


def test_the_picks_analysis_plays_the_models_own_episode(tmp_path):
    """``bench_learned --part picks`` (``fedsel_eval.learned.picks_episode``) asks the oracle at every round of the
    model's episode; the oracle's candidate rounds are undone, so the episode (its accuracy after every round) is the
    one the model plays alone."""
    from fedsel_env.bench import scenario
    from fedsel_eval.episodes import run_episode
    from fedsel_eval.learned import picks_episode

    env = _churn_env(max_rounds=4)
    spec = env.selection_spec
    weights = dict.fromkeys(param_names(spec), 0.0)
    weights.update(cover_pick=1.0, loss=0.5, w=0.3)
    (tmp_path / "set_es.json").write_text(json.dumps({"params": weights}))
    row = picks_episode(env, scenario("Churn"), tmp_path, 103)
    with_oracle = float(env.view.accuracy)
    alone = run_episode(env, None, 103, make_policy=lambda s: SetESAgent(s, model=str(tmp_path)))
    assert row["rounds"] == alone["metrics"]["rounds"] == 4
    assert with_oracle == alone["curves"]["accuracy"][-1]
    assert 0.0 <= row["overlap"] <= 1.0 and set(row["oracle_minus_learned"]) == set(token_names(spec))
    env.close()


def test_the_search_can_start_at_kcenter_cover():
    """``start='kcenter_cover'``: the search's first mean is weight 1 on ``cover_pick`` alone (the heuristic itself,
    as tested round by round above); an unknown start is refused."""
    env = _churn_env(max_rounds=2)
    names = param_names(env.selection_spec)
    es, _rng = make_search(_tiny(start="kcenter_cover", sigma0=0.3), names)
    want = np.zeros(len(names))
    want[names.index("cover_pick")] = 1.0
    assert np.array_equal(np.asarray(es.mean), want) and es.sigma == 0.3
    assert np.array_equal(np.asarray(make_search(_tiny(), names)[0].mean), np.zeros(len(names)))
    with pytest.raises(ValueError, match="start"):
        _tiny(start="pow_d")
    env.close()
