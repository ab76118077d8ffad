"""Scenario families (issue #42, fedsel_env/families.py): seeded draws, the bench scenarios never among them, seeds
held apart from every bench seed, Ω calibrated by the bench's rule, and set_es trained on a family through the
front door and deployed unchanged on a bench scenario."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsel_env.bench import BENCH_SCENARIOS, REPORTING_SEEDS, TUNING_SEEDS, federation_seed, scenario
from fedsel_env.config import make_config
from fedsel_env.families import (FAMILIES, FAMILY_REPORTING_SEEDS, FAMILY_TUNING_SEEDS, Family, Ranges,
                                 calibrate_omega, check_family_seeds, family, is_bench_config)
from fedsel_env.rollout import run_episode

ROOT = Path(__file__).resolve().parents[1]
CONFIRM_SEEDS = range(50_000, 50_030)  # experiments/bench_rl.py --part confirm


def test_the_built_in_families_are_registered_one_per_objective():
    assert {f.objective for f in FAMILIES.values()} == {"rounds_to_target", "time_to_target", "acc_worst10"}
    assert scenario("family:MixedTime") is FAMILIES["MixedTime"]
    assert FAMILIES["MixedTime"].lower_is_better and not FAMILIES["MixedWorst10"].lower_is_better


def test_a_draw_depends_on_the_family_and_the_seed_alone():
    fam = FAMILIES["MixedRounds"]
    a = [fam.uncalibrated(s) for s in range(20)]
    assert a == [fam.uncalibrated(s) for s in range(20)]  # the same seed, the same federation
    assert len({json.dumps(c, sort_keys=True) for c in a}) == 20  # different seeds, different federations
    other = Family("Other", "rounds_to_target")
    assert all(other.uncalibrated(s) != a[s] for s in range(5))  # the name seeds the draws too


def test_draws_are_valid_env_configs_over_the_ranges_the_issue_names():
    seen = {"dataset": set(), "partition": set(), "free_rider": set(), "inflated": set(), "stragglers": 0,
            "deadline": set(), "churn": 0, "noisy": 0}
    ns = []
    for name in ("MixedRounds", "MixedTime", "MixedWorst10"):
        fam = FAMILIES[name]
        for s in range(150):
            cfg = fam.uncalibrated(s)
            make_config(cfg)  # every field valid (raises naming a bad one)
            ns.append(cfg["num_clients"])
            assert 2 <= cfg["clients_per_round"] < cfg["num_clients"]
            seen["dataset"].add(cfg["dataset"])
            seen["partition"].add(cfg.get("partition"))
            adv = cfg.get("adversary", {})
            if adv.get("free_rider"):
                seen["free_rider"].add(True)
                seen["inflated"].add(adv["loss_scale"] > 1.0)
            if adv.get("straggler_fraction"):
                seen["stragglers"] += 1
                seen["deadline"].add(adv["deadline"] is None)
            seen["churn"] += isinstance(cfg["system"]["availability"], list)
            seen["noisy"] += "noisy_clients" in cfg.get("dataset_params", {})
            if name == "MixedWorst10":
                assert cfg["max_rounds"] <= 30 and cfg["target_accuracy"] == 1.0
    assert seen["dataset"] == {"digits", "fashion_mnist", "synthetic"}
    assert seen["partition"] == {"sigma", "dirichlet", "shards", "natural"}
    assert seen["inflated"] == {True, False} and seen["deadline"] == {True, False}
    assert seen["stragglers"] > 0 and seen["churn"] > 0 and seen["noisy"] > 0
    assert min(ns) >= 20 and max(ns) <= 200 and max(ns) > 100


def test_the_bench_scenarios_are_never_drawn():
    for sc in BENCH_SCENARIOS:
        assert is_bench_config(sc.config, sc.objective)
    churn = scenario("Churn")
    assert not is_bench_config(churn.config, "rounds_to_target")  # the objective is part of what is excluded
    # ranges collapsed onto Churn's exact config: every attempt is Churn, so the family refuses the seed
    onto_churn = Ranges(datasets={"digits": 1}, num_clients=(40, 40), clients_fraction=(0.125, 0.125),
                        label_skew={"sigma": 1}, sigma=(0.8, 0.8), quantity_skew_p=0.0, noisy_p=0.0,
                        free_riders_p=0.0, stragglers_p=0.0, availability=(1.0, 1.0), churn_p=1.0,
                        churn_fraction=(0.5, 0.5), churn_availability=(0.1, 0.1), max_rounds=(30, 30))
    cfg = Family("OntoChurn", "rounds_to_target", onto_churn).uncalibrated(0)  # another objective: allowed
    assert {k: cfg[k] for k in churn.config if k != "target_accuracy"} == {
        k: v for k, v in churn.config.items() if k != "target_accuracy"}
    with pytest.raises(ValueError, match="were all bench scenarios' configs: widen"):
        Family("OntoChurn", "acc_worst10", onto_churn).uncalibrated(0)
    for fam in FAMILIES.values():
        assert not any(is_bench_config(fam.uncalibrated(s), fam.objective) for s in range(50))


def test_family_seeds_are_disjoint_from_every_bench_seed():
    bench = {*TUNING_SEEDS, *REPORTING_SEEDS, *CONFIRM_SEEDS}
    assert not bench & {*FAMILY_TUNING_SEEDS, *FAMILY_REPORTING_SEEDS}
    assert not set(FAMILY_TUNING_SEEDS) & set(FAMILY_REPORTING_SEEDS)
    held = {federation_seed(s) for s in [*TUNING_SEEDS, *REPORTING_SEEDS]}
    assert not held & {federation_seed(s) for s in [*FAMILY_TUNING_SEEDS, *FAMILY_REPORTING_SEEDS]}
    from agents.training.set_es import ESConfig, check_training_seeds

    for seed in (0, 1, 2):  # the training seeds of a generalist: ES's training federations pass the checks
        check_training_seeds(ESConfig(scenario="family:MixedRounds", seed=seed, generations=60, episodes=8,
                                      eval_seeds=list(FAMILY_TUNING_SEEDS)))
    fam = FAMILIES["MixedRounds"]
    with pytest.raises(ValueError, match="tuning or reporting seeds"):
        check_family_seeds(fam, {"episode": FAMILY_TUNING_SEEDS[0]})
    with pytest.raises(ValueError, match="tuning/reporting federation"):
        check_family_seeds(fam, {"episode": REPORTING_SEEDS[0]})


def test_omega_is_what_random_selection_reaches_at_half_the_cap():
    fam = FAMILIES["MixedRounds"]
    seed = next(s for s in range(50) if fam.uncalibrated(s)["dataset"] == "digits")
    cfg = {**fam.uncalibrated(seed), "max_rounds": 8}
    seeds = fam.calibration_seeds(seed)
    omega = calibrate_omega(cfg, seeds)
    from fedsel_env.env import FedSelectEnv
    from fedsel_env.families import _RandomScores

    env = FedSelectEnv(config={**cfg, "target_accuracy": 1.0, "observation": "dict"})
    curves = [run_episode(env, _RandomScores(cfg["num_clients"], s), s)["curves"]["accuracy"] for s in seeds]
    env.close()
    at_half = np.median([c[4] for c in curves])
    assert omega == math.floor(at_half * 100 + 1e-9) / 100  # the 0.01 grid, rounded down
    assert sum(c[4] >= omega for c in curves) >= 2  # the median random episode reaches Ω by cap/2
    assert omega > math.floor(np.median([c[0] for c in curves]) * 100) / 100  # Ω asks for progress over w_0


def test_config_for_calibrates_a_to_target_draw_and_only_such_a_draw():
    rounds, worst = FAMILIES["MixedRounds"], FAMILIES["MixedWorst10"]
    seed = next(s for s in range(50) if rounds.uncalibrated(s)["dataset"] != "fashion_mnist"
                and rounds.uncalibrated(s)["num_clients"] <= 40)
    cfg = rounds.config_for(seed)
    assert 0 < cfg["target_accuracy"] < 1 and cfg == rounds.config_for(seed)
    assert {k: v for k, v in cfg.items() if k != "target_accuracy"} == {
        k: v for k, v in rounds.uncalibrated(seed).items() if k != "target_accuracy"}
    assert worst.config_for(7)["target_accuracy"] == 1.0
    assert rounds.scenario_for(seed).objective == "rounds_to_target"


def test_bad_family_input_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="did you mean 'family:MixedTime'"):
        family("family:MixedTme")
    with pytest.raises(ValueError, match="objective = 'final_accuracy' is invalid"):
        Family("F", "final_accuracy")
    with pytest.raises(ValueError, match="num_clients = \\(30, 20\\) is invalid"):
        Ranges(num_clients=(30, 20))
    with pytest.raises(ValueError, match="datasets = .* is invalid"):
        Ranges(datasets={"cifar": 1.0})
    with pytest.raises(ValueError, match="noisy_p = 1.5 is invalid"):
        Ranges(noisy_p=1.5)
    from agents.training.set_es import ESConfig

    with pytest.raises(ValueError, match="K and N differ between its draws"):
        ESConfig(scenario="family:MixedRounds", queries=4, eval_seeds=list(FAMILY_TUNING_SEEDS))


def test_set_es_trains_on_a_family_through_the_front_door_and_deploys_on_a_bench_scenario(tmp_path):
    """train_agent.py --algo set_es --env family:MixedRounds: each training episode a federation of the family
    (different N, data, skew), the learning curve on the family's tuning draws; the weights then play Churn."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "train_agent.py"), "--algo", "set_es", "--env", "family:MixedRounds", "--seed", "0",
         "--runs-dir", str(tmp_path), "--name", "gen", "--no-progress-bar", "--hyperparams", "generations=1",
         "episodes=2", "popsize=2", "eval_every=1", "eval_seeds=[3000000]", "--env-kwargs", "max_rounds=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    folder = tmp_path / "gen"
    row = json.loads((folder / "progress.jsonl").read_text().splitlines()[0])
    assert row["episodes"] == 4 and len(row["eval_values"]) == 1
    policy = json.loads((folder / "set_es.json").read_text())
    assert policy["scenario"] == "MixedRounds" and len(policy["params"]) == 16
    from agents.training.set_es import ESConfig

    cfg = ESConfig(scenario="family:MixedRounds", seed=0, episodes=2, eval_seeds=[3_000_000])
    firsts = [cfg.episode_env_config(cfg.episode_seed(0, j)) for j in range(2)]
    assert firsts[0] != firsts[1]  # two federations of the family, not one scenario twice
    ev = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "--env", "Churn", "--policy", str(folder), "--seeds", "9000",
         "--env-kwargs", "max_rounds=2", "--runs-dir", str(tmp_path / "eval"), "--name", "e", "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    # and on a scenario a user registers as a YAML file (its own objective, time to target), unchanged
    ev = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "--env", str(ROOT / "examples" / "my_federation.yaml"), "--policy",
         f"gen={folder}", "--policy", "random", "--seeds", "9000", "--env-kwargs", "max_rounds=2", "--runs-dir",
         str(tmp_path / "eval"), "--name", "mine", "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "gen" in ev.stdout and "MyFederation" in ev.stdout + ev.stderr
