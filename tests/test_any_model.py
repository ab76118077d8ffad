"""evaluate.py takes any SB3 / sb3-contrib model zip, not only train_agent.py's (issue #16, part 2).

The models are saved by plain SB3 / sb3-contrib scripts inside the tests (no run folder, no env_config.yaml
beside them); the env they were trained in is given on the command line (``--env``, ``--env-kwargs``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import fedsel_env  # noqa: F401  (registers the env ids)
from agents.deploy import detect_algorithm
from fedsel_env.wrappers import SubsetRepair

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
import evaluate  # noqa: E402

torch.set_num_threads(1)
FLAT = ["observation=flat", "flat_parts=[weights, clients, progress]"]
QUIET = ["--no-plots", "--no-progress", "--seeds", "0", "1", "--rounds", "3"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A user's own script: PPO and A2C in the topk mode, MaskablePPO in the subset mode, each saved to a zip."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import A2C, PPO

    folder = tmp_path_factory.mktemp("my_models")
    env = gym.make("fedsel/FedSelect-Tiny-v0", observation="flat", flat_parts=["weights", "clients", "progress"])
    PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu").learn(16).save(folder / "ppo")
    A2C("MlpPolicy", env, n_steps=8, seed=0, device="cpu").learn(8).save(folder / "a2c")
    subset = SubsetRepair(gym.make("fedsel/FedSelect-Tiny-v0", action_mode="subset", observation="flat",
                                   flat_parts=["weights", "clients", "progress"]))
    MaskablePPO("MlpPolicy", subset, n_steps=16, batch_size=16, n_epochs=1, seed=0,
                device="cpu").learn(16).save(folder / "masked")
    return folder


def _records(run: Path):
    return [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]


def test_the_zip_says_which_algorithm_saved_it(saved):
    assert detect_algorithm(saved / "ppo.zip") == "ppo"
    assert detect_algorithm(saved / "a2c.zip") == "a2c"  # same policy class as PPO's: told by what it saves
    assert detect_algorithm(saved / "masked.zip") == "maskable_ppo"


def test_evaluate_runs_a_plain_sb3_model_with_the_env_given_on_the_command_line(saved, tmp_path):
    out = evaluate.main(["--env", "tiny", "--env-kwargs", *FLAT, "--policy", "random", "--policy",
                         str(saved / "ppo.zip"), "--policy", "mine=a2c:" + str(saved / "a2c.zip"),
                         "--out", str(tmp_path / "run"), *QUIET])
    config = json.loads((out / "config.json").read_text())
    by_label = {p["label"]: p for p in config["policies"]}
    assert by_label["ppo:ppo"]["algo"] == "ppo" and by_label["mine"]["algo"] == "a2c"
    recs = _records(out)
    assert {r["policy"] for r in recs} == {"random", "ppo:ppo", "mine"} and len(recs) == 6
    assert all(1 <= len(r["curves"]["round_time"]) <= 3 for r in recs)


def test_a_maskable_model_gets_masks_and_never_picks_an_unavailable_client(saved):
    from fedsel_env.env import FedSelectEnv
    from agents.deploy import ModelPolicy
    from fedsel_eval.policies import build_policy, parse_policy

    config = {"action_mode": "subset", "observation": "dict", "flat_parts": ["weights", "clients", "progress"],
              "system": {"availability": 0.5}}
    env = FedSelectEnv(preset="tiny", config=config)
    spec = parse_policy(str(saved / "masked.zip"), env.config | {"observation": "flat"})
    unavailable_seen = 0
    for seed in range(3):
        policy = build_policy(spec, env.selection_spec, seed)
        assert isinstance(policy, ModelPolicy) and policy.masked and policy.repair
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            available = env.action_masks().copy()
            unavailable_seen += int(not available.all())
            action, _ = policy.predict(obs)
            obs, _, terminated, truncated, info = env.step(action)  # the env's strict subset contract holds
            assert available[info["selected"]].all() and 1 <= len(info["selected"]) <= 3
            done = terminated or truncated
    assert unavailable_seen > 0


def test_without_the_env_it_was_trained_in_the_error_names_the_fix(saved, tmp_path):
    with pytest.raises(ValueError, match=r"reads a flat observation of shape \(179,\).*observation=flat"):
        evaluate.main(["--env", "tiny", "--policy", str(saved / "ppo.zip"), "--out", str(tmp_path / "a"), *QUIET])
    with pytest.raises(ValueError, match=r"expects observations of shape \(179,\).*flat_parts \['weights'\]"):
        evaluate.main(["--env", "tiny", "--env-kwargs", "observation=flat", "--policy", str(saved / "ppo.zip"),
                       "--out", str(tmp_path / "b"), *QUIET])
    with pytest.raises(ValueError, match="'sarsa' is no model algorithm.*maskable_ppo"):
        evaluate.main(["--env", "tiny", "--policy", "sarsa:" + str(saved / "ppo.zip"), "--out", str(tmp_path / "c"),
                       *QUIET])


def test_an_unreadable_zip_is_refused_by_name(tmp_path):
    bad = tmp_path / "notes.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a saved Stable-Baselines3 model"):
        evaluate.main(["--env", "tiny", "--policy", str(bad), "--out", str(tmp_path / "run"), *QUIET])
