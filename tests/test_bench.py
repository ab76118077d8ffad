"""FedSelect-Bench (issue #28): the scenarios, the federation's snapshot, the lookahead oracle, the scores."""
from __future__ import annotations

import hashlib
import math

import gymnasium as gym
import numpy as np
import pytest

import agents
import fedsel_env  # noqa: F401  (registers the ids)
from fedsel_env.bench import (OBJECTIVES, REPORTING_SEEDS, SCENARIOS, TUNING_SEEDS, episode_objective,
                              normalised_score, scenario, select)
from fedsel_env.env import FedSelectEnv


def _tiny(**extra):
    cfg = {"preset": "tiny", "num_clients": 8, "clients_per_round": 3, "max_rounds": 6, "target_accuracy": 1.0,
           "model": "mlp", "model_params": {"hidden": 8}, "dataset": "digits", "samples_per_client": None}
    cfg.update(extra)
    return cfg


def _sha(t) -> str:
    return hashlib.sha256(t.detach().cpu().numpy().tobytes()).hexdigest()


# --------------------------------------------------------------------------------------------- scenarios
def test_at_least_eight_scenarios_each_with_statement_objective_and_id():
    assert len(SCENARIOS) >= 8
    assert not set(TUNING_SEEDS) & set(REPORTING_SEEDS)
    for sc in SCENARIOS.values():
        assert sc.objective in OBJECTIVES and len(sc.statement) > 80
        assert sc.env_id == f"fedsel/Bench-{sc.name}-v0" and sc.env_id in gym.registry
        assert scenario(sc.env_id) is sc
    assert any(s.config["num_clients"] >= 1000 and s.config["clients_per_round"] == 20 for s in SCENARIOS.values())
    with pytest.raises(ValueError, match="unknown bench scenario 'Nope'"):
        select("Nope,Churn")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_builds_and_steps(name):
    env = gym.make(f"fedsel/Bench-{name}-v0", max_rounds=2)
    obs, info = env.reset(seed=TUNING_SEEDS[0])
    agent = agents.make("random", env.unwrapped.selection_spec, seed=0)
    for _ in range(2):
        obs, reward, terminated, truncated, info = env.step(agent.predict(obs)[0])
        assert 0.0 <= info["accuracy"] <= 1.0 and math.isfinite(reward)
        if terminated or truncated:
            break
    env.close()


def test_noisy_clients_corrupt_only_their_training_labels():
    clean = FedSelectEnv(config=_tiny())
    noisy = FedSelectEnv(config=_tiny(dataset_params={"noisy_clients": 0.25, "label_noise": "shift"}))
    clean.reset(seed=3), noisy.reset(seed=3)
    a, b = clean.federation.data, noisy.federation.data
    assert np.array_equal(a.x_train.numpy(), b.x_train.numpy()) and np.array_equal(a.y_test, b.y_test)
    changed = [k for k in range(8) if not np.array_equal(a.client_train(k)[1], b.client_train(k)[1])]
    assert len(changed) == 2  # round(0.25 * 8)
    for k in changed:
        assert np.array_equal(b.client_train(k)[1], (a.client_train(k)[1] + 1) % 10)
    with pytest.raises(ValueError, match="dataset_params.noisy_clients"):
        FedSelectEnv(config=_tiny(dataset_params={"noisy_clients": 1.5})).reset(seed=0)


# --------------------------------------------------------------------------------------------- snapshot
def test_snapshot_restore_is_exact_with_every_kind_of_state():
    """Stragglers, drop-outs, a deadline, attackers, partial availability and q-FedAvg's server state."""
    cfg = _tiny(aggregator="qfedavg", aggregator_params={"q": 1.0},
                adversary={"attacker_fraction": 0.25, "loss_scale": 2.0, "dropout": 0.2,
                           "straggler_fraction": 0.25, "deadline": 6.0})
    env = FedSelectEnv(config=cfg)
    env.reset(seed=5)
    fed = env.federation
    rng = np.random.default_rng(0)
    picks = [rng.choice(8, 3, replace=False) for _ in range(4)]
    fed.play_round(picks[0])
    fed.open_round()
    snap = fed.snapshot()

    def play():
        out = []
        for p in picks[1:]:
            r = fed.play_round(p)
            out.append((_sha(r.global_params), r.clock, r.responders.tolist(), r.evaluation.accuracy,
                        fed.open_round().available.tolist()))
        out.append(fed.query_losses(np.arange(8)).tolist())
        return out

    first = play()
    fed.restore(snap)
    assert play() == first
    fed.restore(snap)  # a snapshot can be restored again
    assert play() == first


# --------------------------------------------------------------------------------------------- the oracle
def test_lookahead_leaves_the_env_unchanged():
    """An episode with the oracle planning before every step equals the same actions without it."""
    cfg = _tiny(adversary={"dropout": 0.2, "straggler_fraction": 0.25}, max_rounds=4)
    actions = []

    def episode(plan: bool):
        env = FedSelectEnv(config=cfg)
        obs, info = env.reset(seed=11)
        oracle = agents.make("lookahead", env.selection_spec, seed=1, candidates=4)
        oracle.bind(env)
        agent = agents.make("random", env.selection_spec, seed=2)
        trace, done = [], False
        while not done:
            if plan:
                oracle.predict(obs)
                assert len(oracle.last_candidates) >= 4
            a, _ = agent.predict(obs)
            obs, r, te, tr, info = env.step(a)
            trace.append((_sha(env.federation.global_params), info["clock"], info["accuracy"], info["loss_queries"],
                          obs["clients"].tobytes(), obs["weights"].tobytes()))
            done = te or tr
        return trace

    assert episode(plan=True) == episode(plan=False)
    del actions


@pytest.mark.parametrize("name,depth", [("FreeRiders", 1), ("Stragglers", 1), ("Churn", 2)])
def test_lookahead_plays_its_candidates_side_by_side_bit_for_bit_as_one_after_another(name, depth):
    """``batch_candidates`` (the default) plays the M candidate rounds on copies of the round state, their local
    training fused into one call: every candidate's score is the one-after-another score bit for bit (free riders'
    uploads, stragglers' deadline, Churn's availability and a second rollout round), and the env is left as it was."""
    sc = scenario(name)
    runs = {}
    for batch in (False, True):
        env = FedSelectEnv(config={**sc.env_config(), "max_rounds": 3})
        obs, _ = env.reset(seed=9000)
        oracle = agents.make("lookahead", env.selection_spec, seed=3, objective=sc.objective, candidates=6,
                             depth=depth, batch_candidates=batch)
        oracle.bind(env)
        oracle.reset(obs)
        trace, done = [], False
        while not done:
            cands, scores = oracle.plan(obs)
            pick = cands[int(np.argmax(scores))]
            obs, r, te, tr, info = env.step(oracle.to_action(pick))
            trace.append(([c.tolist() for c in cands], scores.tobytes(), _sha(env.federation.global_params),
                          obs["weights"].tobytes(), r, info["clock"]))
            done = te or tr
        runs[batch] = (trace, oracle.planned_rounds)
    assert runs[True] == runs[False]
    assert runs[True][1] == sum(len(step[0]) for step in runs[True][0]) * depth  # every candidate, depth rounds each


@pytest.mark.parametrize("objective", ["rounds_to_target", "acc_worst10"])
def test_lookahead_picks_the_best_of_its_candidates_checked_on_fresh_envs(objective):
    cfg = _tiny()
    env = FedSelectEnv(config=cfg)
    obs, _ = env.reset(seed=7)
    oracle = agents.make("lookahead", env.selection_spec, seed=0, candidates=5, proposers=[], objective=objective)
    oracle.bind(env)
    action, _ = oracle.predict(obs)
    chosen = np.flatnonzero(np.asarray(action) > 0)
    scores = []
    for cand in oracle.last_candidates:  # each candidate played for real on its own fresh env
        fresh = FedSelectEnv(config=cfg)
        fresh.reset(seed=7)
        r = fresh.federation.play_round(cand)
        acc = r.evaluation.accuracy if objective == "rounds_to_target" else \
            float(np.sort(r.evaluation.client_accuracies)[:1].mean())  # worst 10% of 8 clients: one client
        scores.append(acc)
    assert len(scores) == 5 and np.allclose(scores, oracle.last_scores)
    best = oracle.last_candidates[int(np.argmax(scores))]
    assert sorted(chosen.tolist()) == sorted(best.tolist())
    assert oracle.planned_rounds == 5


def test_lookahead_is_left_out_of_all_and_checks_its_parameters():
    from fedsel_eval import hand_written_agents

    env = FedSelectEnv(config=_tiny())
    names, skipped = hand_written_agents(env.selection_spec)
    assert "lookahead" not in names and "privileged" in skipped["lookahead"]
    with pytest.raises(ValueError, match="'objective'"):
        agents.make("lookahead", env.selection_spec, objective="speed")
    with pytest.raises(ValueError, match="'candidates'"):
        agents.make("lookahead", env.selection_spec, candidates=0)
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="bind it to the env"):
        agents.make("lookahead", env.selection_spec).predict(obs)


# --------------------------------------------------------------------------------------------- scores
def test_normalised_score_on_hand_made_numbers():
    assert normalised_score(random=30.0, oracle=20.0, policy=25.0) == pytest.approx(0.5)   # rounds: lower better
    assert normalised_score(random=30.0, oracle=20.0, policy=20.0) == pytest.approx(1.0)
    assert normalised_score(random=30.0, oracle=20.0, policy=35.0) == pytest.approx(-0.5)  # worse than random
    assert normalised_score(random=0.60, oracle=0.70, policy=0.67) == pytest.approx(0.7)   # accuracy: higher better
    assert math.isnan(normalised_score(random=30.0, oracle=30.0, policy=25.0))            # no headroom


def test_headroom_and_normalised_interval_on_hand_made_episodes():
    from fedsel_eval.bench import ScenarioRun, summarise

    sc = SCENARIOS["NoisyLabels"]  # rounds to Ω: lower is better
    rows = []
    for seed, (r, o, p) in enumerate([(30, 20, 25), (32, 21, 26), (28, 19, 24), (31, 20, 25)]):
        for pol, v in (("random", r), ("lookahead", o), ("mine", p)):
            rows.append({"policy": pol, "seed": seed, "value": float(v), "censored": False, "wall_time_s": 1.0})
    s = summarise(ScenarioRun(sc, sc.env_config(), rows))
    assert s["headroom"]["mean"] == pytest.approx(10.25) and s["headroom"]["lo"] > 0 and not s["low_headroom"]
    mine = s["policies"]["mine"]["normalised"]
    assert mine["mean"] == pytest.approx((30.25 - 25.0) / (30.25 - 20.0))
    assert mine["lo"] <= mine["mean"] <= mine["hi"]
    assert s["policies"]["random"]["normalised"]["mean"] == 0.0
    assert s["policies"]["lookahead"]["normalised"]["mean"] == 1.0


def test_episode_objective_counts_a_missed_target_as_the_cap():
    sc = SCENARIOS["Stragglers"]
    rec = {"reached": False, "metrics": {"rounds_to_target": float("nan"), "time_to_target": float("nan"),
                                         "rounds": 60.0, "sim_time": 480.0}}
    assert episode_objective(sc, rec) == (480.0, True)
    assert episode_objective(SCENARIOS["NoisyLabels"], rec) == (60.0, True)


def test_suite_runs_resumes_and_writes_the_leaderboard(tmp_path):
    import evaluate

    args = ["--suite", "bench", "--scenarios", "Churn", "--policy", "rpow_d", "--rounds", "2", "--seeds", "0", "1",
            "--out", str(tmp_path), "--no-progress"]
    from fedsel_eval.bench import heuristic_policies

    evaluate.main(args)
    lines = (tmp_path / "Churn" / "episodes.jsonl").read_text().splitlines()
    played = 2 * (len(heuristic_policies()) + 1)  # every heuristic (rpow_d among them) and the oracle × 2 seeds
    assert len(lines) == played
    md = (tmp_path / "leaderboard.md").read_text()
    assert "Churn" in md and "rpow_d" in md and (tmp_path / "leaderboard.png").is_file()
    evaluate.main(args + ["--resume"])  # resumed: nothing replayed (without --resume: refused, issue #45)
    assert len((tmp_path / "Churn" / "episodes.jsonl").read_text().splitlines()) == played


def test_calibrated_target_follows_favor_study_rule():
    from experiments.bench_reference import calibrate_target

    curves = [[0.1, 0.5, 0.6, 0.7, 0.8], [0.1, 0.4, 0.655, 0.7, 0.9], [0.1, 0.3, 0.5, 0.6, 0.7]]
    assert calibrate_target(curves, cap=4) == 0.6   # median at round 2 is 0.6 → 0.60
    assert calibrate_target([c[:5] for c in curves[:2]], cap=4) == 0.62  # median 0.6275 → rounded down


def test_reference_script_writes_a_record_that_recomputes(tmp_path):
    """experiments/bench_reference.py --smoke: its record (fedsel_eval.records' format, issue #34) names the
    chunk that played every row, and every mean and headroom in it recomputes from the rows; a second
    invocation keeps the first one's rows under their chunk."""
    from experiments import bench_reference
    from fedsel_eval import recompute, records

    args = ["--smoke", "--out", str(tmp_path), "--scenarios", "Churn"]
    bench_reference.main(args)
    rec = records.load(tmp_path / "bench_reference.json")
    assert rec["rows"] and {r["chunk"] for r in rec["rows"]} == {"c0"}
    assert any(s["stat"] == "paired_t" and "headroom" in s["name"] for s in rec["summaries"])
    assert recompute.main(["--quiet", str(tmp_path / "bench_reference.json")]) == 0
    bench_reference.main(args)  # resumed: nothing left to play; the rows stay the first chunk's
    again = records.load(tmp_path / "bench_reference.json")
    assert [c["id"] for c in again["chunks"]] == ["c0", "c1"] and {r["chunk"] for r in again["rows"]} == {"c0"}
    assert len(again["rows"]) == len(rec["rows"])
