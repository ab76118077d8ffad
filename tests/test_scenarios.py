"""Scenarios as data (issue #46): the registry, the YAML scenario format, and a user's scenario through training
and evaluation (fedsel_env/scenarios.py, docs/BENCHMARK.md "Your own scenario")."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

import agents
from fedsel_env.bench import SCENARIOS, check_fresh_federations, episode_objective, scenario, select
from fedsel_env.config import make_config, resolve_env
from fedsel_env.env import FedSelectEnv
from fedsel_env.rollout import run_episode
from fedsel_env.scenarios import SCENARIO_IDS, Scenario, load_scenario, lookup, register_scenario

ROOT = Path(__file__).resolve().parents[1]
MINE = ROOT / "examples" / "my_federation.yaml"


def _write(tmp_path: Path, doc: dict, name: str = "sc.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _mine(**changes) -> dict:
    doc = yaml.safe_load(MINE.read_text())
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


def test_a_scenario_is_found_by_name_id_or_yaml_path():
    assert lookup("Stragglers") is lookup("fedsel/Bench-Stragglers-v0") is scenario("Stragglers")
    assert len(SCENARIOS) >= 8 and all(SCENARIO_IDS[sc.env_id] == n for n, sc in SCENARIOS.items() if not sc.source)
    for key in (str(MINE), MINE, str(MINE.relative_to(ROOT)) if Path.cwd() == ROOT else str(MINE)):
        sc = scenario(key)
        assert (sc.name, sc.objective, sc.source) == ("MyFederation", "time_to_target", str(key))
        assert sc.env_id == str(key) and sc.lower_is_better
        assert sc.tuning_seeds == tuple(range(100, 110)) and sc.reporting_seeds == tuple(range(9000, 9008))
        assert "objective" not in sc.config and "name" not in sc.config and sc.config["num_clients"] == 20
    assert [s.name for s in select(f"Churn,{MINE}")] == ["Churn", "MyFederation"]
    # --env takes the three forms too: a registered name reads as its id, with the objective as the reward
    assert resolve_env("Stragglers") == resolve_env("fedsel/Bench-Stragglers-v0")
    assert resolve_env("Stragglers")[1]["reward_params"] == {"objective": "time_to_target"}
    with pytest.raises(ValueError, match="unknown --env 'Stragglrs'.*did you mean 'Stragglers'"):
        resolve_env("Stragglrs")


def test_a_registered_scenario_gets_its_gym_id_and_a_name_is_held_once():
    import gymnasium as gym

    sc = Scenario("UnitTestFederation", {"num_clients": 6, "clients_per_round": 2, "max_rounds": 2,
                                         "samples_per_client": 20, "model": "logreg"}, "final_accuracy")
    try:
        assert register_scenario(sc) is sc and register_scenario(sc) is sc   # the same again: nothing changes
        assert lookup("fedsel/Bench-UnitTestFederation-v0") is sc
        env = gym.make("fedsel/Bench-UnitTestFederation-v0")
        assert env.unwrapped.config["reward"] == "objective"
        env.close()
        with pytest.raises(ValueError, match="name 'UnitTestFederation' is taken"):
            register_scenario(Scenario("UnitTestFederation", {}, "acc_worst10"))
    finally:
        SCENARIOS.pop("UnitTestFederation", None)
        SCENARIO_IDS.pop("fedsel/Bench-UnitTestFederation-v0", None)
        gym.registry.pop("fedsel/Bench-UnitTestFederation-v0", None)


def test_the_yaml_round_trip_an_episodes_return_is_minus_its_objective():
    """--env <scenario file> is its env config with the objective as the reward: an episode's return is exactly
    minus its time to Ω (lower is better), the value the bench scores it by."""
    preset, overrides = resolve_env(str(MINE))
    assert overrides["reward"] == "objective" and overrides["reward_params"] == {"objective": "time_to_target"}
    sc = load_scenario(MINE)
    assert overrides == sc.objective_env_config()
    env = FedSelectEnv(config={**overrides, "observation": "dict"}, preset=preset)
    for seed, policy in ((9000, "kcenter_cover"), (9001, "random")):
        rewards = []
        obs, _ = env.reset(seed=seed)
        agent = agents.make(policy, env.selection_spec, seed=seed)
        agent.reset(obs)
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(agent.predict(obs)[0])
            rewards.append(r)
            done = term or trunc
        rec = run_episode(env, None, seed, make_policy=lambda spec: agents.make(policy, spec, seed=seed))
        value, censored = episode_objective(sc, rec)
        assert math.isclose(sum(rewards), -value, rel_tol=1e-9) and value > 0
        assert math.isclose(rec["metrics"]["episode_return"], sum(rewards), rel_tol=1e-12)  # the same episode
    env.close()


def test_a_plain_env_yaml_reads_as_before_and_a_scenarios_own_reward_is_kept(tmp_path):
    plain = {k: v for k, v in _mine().items() if k not in ("objective", "name", "statement", "tuning_seeds",
                                                            "reporting_seeds")}
    preset, overrides = resolve_env(str(_write(tmp_path, plain, "plain.yaml")))
    assert (preset, overrides) == (None, plain) and "reward" not in overrides
    preset, overrides = resolve_env(str(_write(tmp_path, {**plain, "preset": "tiny"}, "with_preset.yaml")))
    assert preset == "tiny" and overrides == plain
    own = _write(tmp_path, _mine(reward="favor", reward_params={"xi": 64}), "own.yaml")
    assert resolve_env(str(own))[1]["reward"] == "favor" and resolve_env(str(own))[1]["reward_params"] == {"xi": 64}
    preset, overrides = resolve_env(str(_write(tmp_path, _mine(preset="tiny"), "scenario_preset.yaml")))
    assert preset == "tiny" and make_config(overrides, preset=preset)["reward"] == "objective"


@pytest.mark.parametrize("changes, match", [
    ({"objective": "time_to_targett"}, "objective = 'time_to_targett' is invalid.*did you mean 'time_to_target'"),
    ({"objective": None}, "names no objective"),
    ({"tuning_seeds": [100, 9000]}, r"share \[9000\].*remove them from one of the two lists"),
    ({"reporting_seeds": [9000, "9001"]}, "reporting_seeds = .* expected a non-empty list of integers"),
    ({"tuning_seeds": [1.5]}, "tuning_seeds = .* expected a non-empty list of integers"),
    ({"reporting_seeds": [9000, 9000]}, "names a seed twice"),
    ({"tuning_seeds": []}, "tuning_seeds = \\[\\] is invalid"),
    ({"name": "Stragglers"}, "name 'Stragglers' is a registered scenario's.*another name"),
    ({"name": "my federation/1"}, "name = 'my federation/1' is invalid"),
    ({"statement": 3}, "statement = 3 is invalid"),
])
def test_a_bad_scenario_file_is_refused_naming_the_field_and_the_fix(tmp_path, changes, match):
    path = _write(tmp_path, _mine(**changes))
    for read in (scenario, resolve_env):   # the registry's lookup and --env say the same
        with pytest.raises(ValueError, match=match):
            read(str(path))


def test_a_missing_file_or_a_misspelled_name_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="scenario file .*nowhere.yaml' does not exist"):
        scenario(str(tmp_path / "nowhere.yaml"))
    with pytest.raises(ValueError, match="unknown bench scenario 'Stragglrs' \\(did you mean 'Stragglers'\\?\\)"):
        scenario("Stragglrs")
    with pytest.raises(ValueError, match="did you mean 'fedsel/Bench-Churn-v0'"):
        scenario("fedsel/Bench-Chrn-v0")
    with pytest.raises(ValueError, match="names no objective.*objective: time_to_target"):
        scenario(str(_write(tmp_path, {"num_clients": 10}, "plain.yaml")))  # a plain env config is no scenario
    with pytest.raises(ValueError, match="does not exist"):
        resolve_env(str(tmp_path / "nowhere.yaml"))


def test_training_checks_use_the_scenarios_own_seeds(tmp_path):
    from agents.training.set_distill import DistillConfig
    from agents.training.set_es import ES_SEED_BASE, ESConfig, check_training_seeds

    assert DistillConfig(scenario=str(MINE), eval_seeds=[100]).scenario == str(MINE)
    assert ESConfig(scenario=MINE, eval_seeds=[100]).scenario == str(MINE)     # a Path is kept as text
    with pytest.raises(ValueError, match="reporting seeds \\[9003\\] of scenario 'MyFederation'"):
        ESConfig(scenario=str(MINE), eval_seeds=[100, 9003])
    elsewhere = _write(tmp_path, _mine(reporting_seeds=[5000, 5001]), "elsewhere.yaml")
    ESConfig(scenario=str(elsewhere), eval_seeds=[9003])                       # not this scenario's reporting seed
    with pytest.raises(ValueError, match="reporting seeds \\[5001\\]"):
        ESConfig(scenario=str(elsewhere), eval_seeds=[5001])
    # a scenario whose tuning seed is a training seed: its federation would be trained on, and is refused
    clash = _write(tmp_path, _mine(tuning_seeds=[ES_SEED_BASE + 1]), "clash.yaml")
    with pytest.raises(ValueError, match="would play a tuning/reporting federation of scenario 'MyFederation'"):
        check_training_seeds(ESConfig(scenario=str(clash), generations=1, episodes=2, eval_seeds=[100]))
    check_training_seeds(ESConfig(scenario=str(MINE), generations=20, episodes=8, eval_seeds=[100]))
    with pytest.raises(ValueError, match="tuning/reporting federation of the bench"):
        check_fresh_federations({"x": 9000})


def test_set_es_trains_on_a_user_yaml_and_the_weights_evaluate_through_fedsel_eval(tmp_path):
    """The round trip of the issue: ESConfig(scenario=<yaml>) trains a generation of set_es on the user's
    federation, scored by its objective, and fedsel_eval plays the trained weights beside a heuristic on it."""
    import fedsel_eval
    from agents.training.set_es import ESConfig, train
    from fedsel_eval.objective import objective_markdown

    cfg = ESConfig(scenario=str(MINE), generations=1, episodes=2, popsize=3, eval_seeds=[100, 101],
                   env_overrides={"max_rounds": 6})
    summary = train(cfg, tmp_path / "run", log=lambda _l: None)
    assert summary["complete"] and summary["scenario"] == "MyFederation" and summary["training_episodes"] == 6
    policy = json.loads((tmp_path / "run" / "set_es.json").read_text())
    assert policy["objective"] == "time_to_target" and policy["generations"] == 1
    row = json.loads((tmp_path / "run" / "progress.jsonl").read_text().splitlines()[0])
    assert len(row["eval_values"]) == 2 and all(v > 0 for v in row["eval_values"])    # seconds to Ω (or the cap)
    result = fedsel_eval.run(tmp_path / "eval", env=str(MINE), policies=[f"set_es:model={tmp_path / 'run'}",
                                                                          "kcenter_cover", "random"],
                             seeds=[9000, 9001], rounds=6, plots=False, progress=False)
    by = {(r["policy"], r["seed"]): r for r in result.records}
    assert len(by) == 6 and all(r["metrics"]["rounds"] <= 6 for r in by.values())
    sc = scenario(str(MINE))
    for r in by.values():   # the env's reward is the objective: each return is minus the episode's score
        assert math.isclose(r["metrics"]["episode_return"], -episode_objective(sc, r)[0], rel_tol=1e-9)
    text = objective_markdown(result.records, sc)
    assert "`time_to_target`, lower is better" in text and "set_es" in text and "reference" in text


def test_set_distill_trains_on_a_user_yaml_its_oracle_scored_by_the_files_objective(tmp_path):
    from agents.training.set_distill import DistillConfig, train

    cfg = DistillConfig(scenario=str(MINE), episodes=1, candidates=3, eval_seeds=[100], batch_size=4,
                        env_overrides={"max_rounds": 3})
    summary = train(cfg, tmp_path / "run", log=lambda _l: None)
    assert summary["complete"] and summary["scenario"] == "MyFederation"
    assert json.loads((tmp_path / "run" / "set_distill.json").read_text())["scenario"] == "MyFederation"
    env = FedSelectEnv(config={**cfg.env_config(), "max_rounds": 3})
    rec = run_episode(env, None, 9000, make_policy=lambda spec: agents.make("set_distill", spec,
                                                                             model=str(tmp_path / "run")))
    assert rec["metrics"]["rounds"] == 3
    env.close()


def test_evaluate_prints_the_objective_of_a_scenario_file_and_the_suite_runs_it(tmp_path, capsys):
    import evaluate
    from fedsel_eval.bench import run_suite, suite_files

    evaluate.main(["--env", str(MINE), "--policy", "random", "--rounds", "2", "--out", str(tmp_path / "plain"),
                   "--no-plots", "--no-progress"])
    out = capsys.readouterr().out
    assert "scenario MyFederation: scored on time_to_target (lower is better)" in out
    assert "**Objective** of scenario `MyFederation`" in out
    # a scenario file has no reference record: every heuristic beside the given policy, on its reporting seeds
    config = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert config["seeds"] == list(range(9000, 9008)) and config["env_config"]["reward"] == "objective"
    labels = [p["label"] for p in config["policies"]]
    assert {"random", "kcenter_cover", "pow_d", "fedcs", "oort"} <= set(labels) and "lookahead" not in labels
    # the suite: no reference record for a user's scenario, so the first 5 of its own reporting seeds
    summaries = run_suite(tmp_path / "suite", [], scenarios=str(MINE), rounds=2, plots=False, log=lambda _l: None,
                          heuristics=False)
    assert [s["scenario"] for s in summaries] == ["MyFederation"]
    assert summaries[0]["seeds"] == [9000, 9001, 9002, 9003, 9004] and summaries[0]["objective"] == "time_to_target"
    assert tmp_path / "suite" / "MyFederation" / "episodes.jsonl" in suite_files(tmp_path / "suite")
    assert not suite_files(tmp_path)   # a plain evaluation's folder beside it is no suite's
