"""The front door (issue #46): one trainer registry, one signature, one command for every learned design."""
from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import train_agent
from agents.training import trainers

ROOT = Path(__file__).resolve().parents[1]
#: a set_es run of a few seconds: 3 candidates × 2 federations of 3 rounds a generation, the curve on one seed
ES_TINY = ["--hyperparams", "episodes=2", "popsize=3", "eval_every=1", "eval_seeds=[100]", "--env-kwargs", "max_rounds=3"]
QUIET = ["--no-progress-bar", "--verbose", "0"]


def _progress(folder: Path) -> list:
    return [{k: v for k, v in json.loads(x).items() if k != "wall_s"}
            for x in (folder / "progress.jsonl").read_text().splitlines()]


def test_every_design_and_sb3_algorithm_is_a_trainer_of_one_signature():
    names = trainers.registered()
    for name in ("set_es", "set_es_q", "set_distill", "set_distill_cover", "pc_dqn", "pc_ppo", "favor", "favor+",
                 "pl_ppo", "pl_a2c", "ppo", "dqn"):
        assert name in names
    want = None
    for name in names:
        params = inspect.signature(trainers.trainer(name).train).parameters
        sig = [(p.name, p.kind) for p in params.values() if p.name != "algo"]
        want = want or sig
        assert sig == want, name          # (scenario_or_env, seed, folder, hyperparams, *, resume, progress, ...)
    assert [n for n, _ in want][:4] == ["scenario_or_env", "seed", "folder", "hyperparams"]
    assert {"resume", "progress", "deadline", "log", "mapper", "stop_after"} <= {n for n, _ in want}


def test_settings_come_from_configs_keyed_by_scenario_with_overrides_over_them():
    assert trainers.load_settings("set_es", "Churn") == {"generations": 50, "episodes": 16, "eval_every": 5}
    assert trainers.load_settings("set_es", "fedsel/Bench-PowerOfChoice-v0")["start"] == "kcenter_cover"
    assert trainers.load_settings("set_es", "Large") == {"generations": 20, "episodes": 4, "eval_every": 5,
                                                         "start": "kcenter_cover", "sigma0": 0.3, "popsize": 8}
    assert trainers.load_settings("set_es", "examples/my_federation.yaml") == {  # no entry of its own: default
        "generations": 40, "episodes": 8, "eval_every": 5}
    got = trainers.load_settings("set_es", "Churn", {"generations": 2, "env_overrides": {"max_rounds": 3}})
    assert got == {"generations": 2, "episodes": 16, "eval_every": 5, "env_overrides": {"max_rounds": 3}}
    q = trainers.es_config("set_es_q", "Churn", 0, {})
    assert q.queries == 10                                  # set_es_q asks min(2K, N) = 2 × 5 clients by default


def test_a_scenarios_own_config_entry_overrides_its_ids_config_and_env_kwargs_override_both(tmp_path):
    """configs/pc_dqn.yml's QuantitySkew entry pins FAVOR's reward (the leaderboard's rows were trained on it): its
    env_kwargs win over the id's registered config (the objective reward), as gym.make(id, **env_kwargs) does in
    rl-zoo3; --env-kwargs win over both; a scenario without its own entry keeps the id's reward."""
    from agents.training import cli
    from agents.training.settings import prepare

    def env_config(*argv):
        return prepare(cli.parse_args(["--algo", "pc_dqn", *argv, "--runs-dir", str(tmp_path)]))["env_config"]

    cfg = env_config("--env", "fedsel/Bench-QuantitySkew-v0")
    assert (cfg["reward"], cfg["reward_params"], cfg["pca_components"]) == ("favor", {}, 100)
    cfg = env_config("--env", "QuantitySkew", "--env-kwargs", "reward=objective",
                     "reward_params={objective: rounds_to_target}")
    assert (cfg["reward"], cfg["reward_params"]) == ("objective", {"objective": "rounds_to_target"})
    cfg = env_config("--env", "NoisyLabels")                 # no entry of its own in configs/pc_dqn.yml
    assert (cfg["reward"], cfg["reward_params"]) == ("objective", {"objective": "rounds_to_target"})


def test_unknown_trainers_and_typos_are_refused_naming_what_exists(tmp_path):
    with pytest.raises(ValueError, match=r"unknown --algo 'set_ess' \(did you mean 'set_es'\?\); registered "
                                         r"trainers: \[.*'set_distill_cover', 'set_es', 'set_es_q'\]"):
        train_agent.main(["--algo", "set_ess", "--env", "Churn", "--runs-dir", str(tmp_path)])
    with pytest.raises(ValueError, match="unknown set_es hyper-parameter 'generatoins'.*did you mean 'generations'"):
        train_agent.main(["--algo", "set_es", "--env", "Churn", "--hyperparams", "generatoins=2",
                          "--runs-dir", str(tmp_path)])
    with pytest.raises(ValueError, match="sigma0 = -1"):
        train_agent.main(["--algo", "set_es", "--env", "Churn", "--hyperparams", "sigma0=-1", "--runs-dir", str(tmp_path)])
    with pytest.raises(ValueError, match="unknown scenario|unknown bench scenario"):
        train_agent.main(["--algo", "set_distill", "--env", "Nowhere", "--runs-dir", str(tmp_path)])
    with pytest.raises(ValueError, match="--ray and --n-envs 4 exclude each other"):
        train_agent.main(["--algo", "set_es", "--env", "Churn", "--ray", "--n-envs", "4", "--runs-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())                      # nothing written before the settings are checked


def test_n_envs_picks_who_plays_a_set_es_generation_and_not_what_it_gives(tmp_path):
    """``--n-envs E``: the generation's episodes E at a time through one vector env (1: one after another; the
    default 16); the progress log and the policy are the same bit for bit (issue #43)."""
    from agents.training.set_es import SerialMapper, VectorMapper

    runs = {}
    for n in ("1", "3", None):
        runs[n] = train_agent.main(["--algo", "set_es", "--env", "Churn", "--hyperparams", "generations=2", *ES_TINY[1:],
                                    *(["--n-envs", n] if n else []), "--runs-dir", str(tmp_path), "--name", f"n{n}",
                                    *QUIET])
    assert _progress(runs["1"]) == _progress(runs["3"]) == _progress(runs[None])
    assert (runs["1"] / "set_es.json").read_bytes() == (runs["3"] / "set_es.json").read_bytes()
    args = train_agent.parse_args(["--algo", "set_es", "--env", "Churn", "--n-envs", "5"])
    mapper = train_agent.design_mapper(args, train_agent.prepare(args))
    assert isinstance(mapper, VectorMapper) and mapper.n_envs == 5
    args = train_agent.parse_args(["--algo", "set_es", "--env", "Churn", "--n-envs", "1"])
    assert isinstance(train_agent.design_mapper(args, train_agent.prepare(args)), SerialMapper)
    for flag in (["--n-envs", "2"], ["--ray"]):
        with pytest.raises(ValueError, match=f"set_distill trains in one process.*drop {flag[0]}"):
            train_agent.main(["--algo", "set_distill", "--env", "Churn", *flag, "--runs-dir", str(tmp_path / "d"),
                              *QUIET])
    assert not (tmp_path / "d").exists()                     # refused before anything is written


def test_set_es_trains_through_train_agent_and_deploys_from_its_run_folder(tmp_path):
    from agents.deploy import run_folder_agent
    from fedsel_env.rollout import run_episode
    from fedsel_eval.policies import build_policy, parse_policy

    run = train_agent.main(["--algo", "set_es", "--env", "Churn", "--hyperparams", "generations=2", *ES_TINY[1:],
                            "--runs-dir", str(tmp_path), *QUIET])
    assert run == tmp_path / "set_es_Churn_seed0"
    assert {"args.yaml", "hyperparams.yaml", "env_config.yaml", "set_es.json", "progress.jsonl", "summary.json"} \
        <= {p.name for p in run.iterdir()}
    assert list((run / "tb" / "SET_ES").glob("events.out.tfevents.*"))     # TensorBoard scalars
    assert yaml.safe_load((run / "hyperparams.yaml").read_text())["env_overrides"] == {"max_rounds": 3}
    assert json.loads((run / "set_es.json").read_text())["generations"] == 2
    with pytest.raises(ValueError, match="already exists: pass --resume"):
        train_agent.main(["--algo", "set_es", "--env", "Churn", "--runs-dir", str(tmp_path)])
    assert run_folder_agent(run) == "set_es"
    p = parse_policy(str(run))                               # evaluate.py --policy runs/train/<run>
    assert (p.kind, p.source, p.label) == ("agent", "set_es", "set_es:set_es_Churn_seed0")
    from fedsel_env.env import FedSelectEnv

    env = FedSelectEnv(config=yaml.safe_load((run / "env_config.yaml").read_text()))
    rec = run_episode(env, None, 100, make_policy=lambda spec: build_policy(p, spec, 100))
    env.close()
    assert rec["metrics"]["rounds"] == 3


def test_set_distill_trains_through_train_agent_on_a_tiny_budget(tmp_path):
    run = train_agent.main(["--algo", "set_distill_cover", "--env", "fedsel/Bench-Churn-v0", "--hyperparams",
                            "episodes=1", "candidates=3", "hidden=8", "beta_episodes=1", "eval_every=1",
                            "eval_seeds=[100]", "--env-kwargs", "max_rounds=3", "--runs-dir", str(tmp_path), *QUIET])
    meta = json.loads((run / "set_distill.json").read_text())
    assert meta["design"] == "set_distill_cover" and meta["episodes"] == 1
    assert "eval_mean" in _progress(run)[0]                  # the learning curve, played by fedsel_env.rollout
    assert list((run / "tb" / "SET_DISTILL_COVER").glob("events.out.tfevents.*"))
    from fedsel_eval.policies import parse_policy

    assert parse_policy(str(run)).source == "set_distill"


def test_a_run_killed_mid_generation_resumes_to_the_uninterrupted_run_bit_for_bit(tmp_path, monkeypatch):
    """SIGKILL (no clean-up of any kind) while a generation plays; ``--resume`` gives the same set_es.json and log.
    On a user's scenario file (issue #46's done-when: ``--env my_federation.yaml``, objective time_to_target)."""
    yaml_file = str(ROOT / "examples" / "my_federation.yaml")
    assert yaml.safe_load(Path(yaml_file).read_text())["objective"] == "time_to_target"
    args = ["--algo", "set_es", "--env", yaml_file, "--hyperparams", "generations=4", *ES_TINY[1:], *QUIET]
    whole = train_agent.main([*args, "--runs-dir", str(tmp_path / "whole")])
    cut = tmp_path / "cut" / whole.name
    # the cut run names its scenario file by a path relative to its own directory, which the resume is not in, and
    # the file is gone before the resume: the run's copy (scenario/my_federation.yaml) is what the resume reads
    src = tmp_path / "src"
    src.mkdir()
    (src / "my_federation.yaml").write_bytes(Path(yaml_file).read_bytes())
    rel = [a if a != yaml_file else "my_federation.yaml" for a in args]
    proc = subprocess.Popen([sys.executable, str(ROOT / "train_agent.py"), *rel, "--runs-dir", str(tmp_path / "cut")],
                            cwd=src, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        while proc.poll() is None and not ((cut / "progress.jsonl").is_file()
                                           and (cut / "progress.jsonl").read_text().count("\n") >= 1):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    done = len(_progress(cut))
    assert done < 4 or proc.returncode == 0                  # killed part-way (or, on a fast machine, finished)
    assert (cut / "scenario" / "my_federation.yaml").read_bytes() == Path(yaml_file).read_bytes()
    (src / "my_federation.yaml").unlink()
    train_agent.main(["--name", whole.name, "--runs-dir", str(tmp_path / "cut"), "--resume", *QUIET])
    assert (cut / "set_es.json").read_bytes() == (whole / "set_es.json").read_bytes()
    assert _progress(cut) == _progress(whole)
    # the file back where the run's settings name it, but edited: a resume refuses it, naming the run's copy
    monkeypatch.chdir(src)
    (src / "my_federation.yaml").write_text(Path(yaml_file).read_text() + "\nclients_per_round: 5\n")
    with pytest.raises(ValueError, match="has changed since the run started.*cp .*scenario/my_federation.yaml"):
        train_agent.main(["--name", whole.name, "--runs-dir", str(tmp_path / "cut"), "--resume", *QUIET])


def test_a_new_trainer_is_one_registration_and_trains_through_train_agent(tmp_path):
    """A user's design: registered with its settings' fields, trained by train_agent.py on any scenario, the env
    untouched."""
    seen = {}

    def train_mine(scenario_or_env, seed, folder, hyperparams, *, resume=False, progress=False,
                   deadline=float("inf"), log=print, mapper=None, stop_after=None):
        seen.update(env=scenario_or_env, seed=seed, hp=dict(hyperparams), resume=resume)
        (folder / "mine.json").write_text(json.dumps(hyperparams))
        return {"complete": True}

    trainers.register_trainer(trainers.Trainer("mine", train_mine, fields=("steps", "env_overrides")))
    try:
        with pytest.raises(ValueError, match="registered already"):
            trainers.register_trainer(trainers.Trainer("mine", train_mine))
        run = train_agent.main(["--algo", "mine", "--env", "Stragglers", "--seed", "3", "--hyperparams", "steps=7",
                                "--runs-dir", str(tmp_path), *QUIET])
        assert seen == {"env": "Stragglers", "seed": 3, "hp": {"steps": 7}, "resume": False}
        assert json.loads((run / "mine.json").read_text()) == {"steps": 7}
        with pytest.raises(ValueError, match="unknown mine hyper-parameter 'stesp'"):
            trainers.train("mine", "Stragglers", 0, tmp_path / "x", {"stesp": 1})
    finally:
        trainers.TRAINERS.pop("mine", None)
