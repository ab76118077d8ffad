"""A researcher's first hour (issue #35): the README's SB3 quick start runs as written, on ids whose
defaults let a plain SB3 algorithm act; the README's loop works for every registered agent
(``agents.make(..., env=env)`` binds what needs binding); training logs say what a step is."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import agents
import fedsel_env
from fedsel_env.config import PRESETS, make_config

ROOT = Path(__file__).resolve().parents[1]


def _quickstart_module():
    spec = importlib.util.spec_from_file_location("bench_quickstart", ROOT / "bench" / "quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readme_python_block(marker: str) -> str:
    q = _quickstart_module()
    found = [b for b in q.fenced_blocks((ROOT / "README.md").read_text(), "python") if marker in b]
    assert len(found) == 1, f"README.md should have one Python block containing {marker!r}"
    return found[0]


# -- the DQN- and PPO-ready ids ----------------------------------------------------------------------------

def test_dqn_and_ppo_ids_take_configs_settings():
    dqn = gym.make("fedsel/FedSelect-DQN-v0")
    ppo = gym.make("fedsel/FedSelect-PPO-v0")
    assert dqn.action_space == spaces.Discrete(20) and isinstance(dqn.observation_space, spaces.Box)
    assert isinstance(ppo.action_space, spaces.Box) and ppo.action_space.shape == (20,)
    # 21 PCA rows of 5, 20 clients' features, 2 progress values: what configs/dqn.yml's entry trained on
    n_feat = len(fedsel_env.CLIENT_FEATURES)
    assert dqn.observation_space.shape == (21 * 5 + 20 * n_feat + 2,)
    import yaml

    for algo, env, preset in (("dqn", dqn, "dqn"), ("ppo", ppo, "ppo")):
        entry = yaml.safe_load((ROOT / "configs" / f"{algo}.yml").read_text())["fedsel/FedSelect-v0"]
        want = make_config(entry["env_kwargs"])
        got = env.unwrapped.config
        assert {k: got[k] for k in PRESETS[preset]} == {k: want[k] for k in PRESETS[preset]}
        assert {k: v for k, v in got.items() if k not in PRESETS[preset]} == \
            {k: v for k, v in make_config({}).items() if k not in PRESETS[preset]}  # the default federation
        env.close()


def test_sb3_dqn_refuses_the_default_id_and_takes_the_dqn_id():
    from stable_baselines3 import DQN

    with pytest.raises(AssertionError, match="action space"):  # why the README names the DQN id
        DQN("MlpPolicy", gym.make("fedsel/FedSelect-v0"))
    DQN("MlpPolicy", gym.make("fedsel/FedSelect-DQN-v0"), buffer_size=100)


def test_readme_sb3_quick_start_runs_as_written(tmp_path, monkeypatch):
    """The README's script, verbatim but for its step count (the README's own count is measured by
    bench/quickstart.py, docs/TRAINING.md): PPO with the Plackett-Luce policy on Stragglers, its objective as the
    reward, saved under runs/; then its model deploys as the README's evaluate.py line says."""
    q = _quickstart_module()
    source = q.script_for(q.readme_script(), steps=64)
    assert "progress_bar=True" in source and 'model.save("runs/' in source
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    import torch

    threads = torch.get_num_threads()
    try:  # the script sets this process's torch threads: give the other tests theirs back
        exec(compile(source, "README.md (SB3 quick start)", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
        namespace["env"].close()
    saved = tmp_path / q.saved_name(source)
    assert saved.is_file()
    model = namespace["model"]
    assert model.num_timesteps >= 64 and model._n_updates > 0
    assert namespace["config"]["reward"] == "objective"  # the return is the score: minus the time to Ω
    readme = (ROOT / "README.md").read_text()
    line = "--policy \"pl_ppo=per_client:model_path=runs/quickstart/pl_ppo_stragglers.zip,sample=true\""
    assert "evaluate.py --env fedsel/Bench-Stragglers-v0" in readme and line in readme
    from fedsel_eval import make_plan
    from fedsel_eval.episodes import run_episode
    from fedsel_eval.policies import build_policy

    plan = make_plan(env="fedsel/Bench-Stragglers-v0", policies=[
        "random", f"pl_ppo=per_client:model_path={saved},sample=true"], seeds=[9000])
    assert plan.env_config["reward"] == "objective"
    env = fedsel_env.make_env("default", **{**plan.env_config, "max_rounds": 3})
    record = run_episode(env, build_policy(plan.policies[1], env.selection_spec, 9000), 9000)
    assert record["metrics"]["episode_return"] == -record["metrics"]["sim_time"]
    env.close()


@pytest.mark.slow
def test_quickstart_bench_trains_evaluates_and_writes_its_record(tmp_path):
    """bench/quickstart.py end to end at a smoke size: the README's script per training seed, the held-out
    episodes, the record (every summary recomputes) and the README paragraph written from it."""
    q = _quickstart_module()
    from fedsel_eval import recompute

    before = (ROOT / "README.md").read_text()
    got = q.main(["--train-seeds", "0", "1", "--steps", "64", "--seeds", "9000", "9001", "--out", str(tmp_path)])
    assert recompute.main(["--quiet", got["record"]]) == 0
    assert "across the 2 training seeds" in got["text"] and "pow_d" in got["text"]
    assert (ROOT / "README.md").read_text() == before  # a smoke run publishes nothing


def test_script_for_refuses_a_script_it_cannot_edit():
    q = _quickstart_module()
    with pytest.raises(ValueError, match="total_timesteps"):
        q.script_for("model.learn(100)", steps=5)


# -- the README loop with every registered agent -----------------------------------------------------------

def _extra_params(name: str, env) -> dict:
    """What an agent needs beyond the env: favor, per_client and set_distill act from a model (an untrained one here),
    set_es from its weights."""
    cfg = env.unwrapped.config
    if name == "favor":
        from stable_baselines3 import DQN

        flat = fedsel_env.make_env("tiny", **{**{k: cfg[k] for k in ("max_rounds",)}, "action_mode": "one",
                                               "observation": "flat", "flat_parts": ["weights"]})
        return {"model": DQN("MlpPolicy", flat, buffer_size=10, seed=0, device="cpu"), "flat_parts": ["weights"]}
    if name == "per_client":
        from stable_baselines3 import PPO

        from agents.per_client_net import PerClientActorCriticPolicy

        return {"model": PPO(PerClientActorCriticPolicy, fedsel_env.make_env("tiny"), n_steps=8, batch_size=8,
                             seed=0, device="cpu")}
    if name == "set_distill":  # a live (untrained) set scorer for this env's observation
        from agents.set_distill import SetScorer

        return {"model": SetScorer(env.observation_space, hidden=8)}
    if name == "set_es":  # its 16 weights: kcenter_cover's pick alone
        from agents.set_es import param_names

        return {"model": {n: float(n == "cover_pick") for n in param_names(env.unwrapped.selection_spec)}}
    if name == "lookahead":  # the planning oracle: two candidates a round, one round deep (seconds, not a minute)
        return {"candidates": 2, "depth": 1, "proposers": ["random"]}
    return {}


@pytest.mark.parametrize("name", sorted(agents.AGENTS))
def test_readme_loop_runs_for_every_registered_agent(name, monkeypatch):
    block = _readme_python_block("agents.make(")
    assert 'gym.make("fedsel/FedSelect-v0")' in block and 'agents.make("random", env=env, seed=0)' in block
    source = block.replace('gym.make("fedsel/FedSelect-v0")', 'gym.make("fedsel/FedSelect-Tiny-v0")')
    source = source.replace('agents.make("random", env=env, seed=0)', "agents.make(NAME, env=env, seed=0, **EXTRA)")
    source = source.replace("print(", "LOG.append(")  # keep the log, quietly
    env_probe = gym.make("fedsel/FedSelect-Tiny-v0")
    namespace = {"NAME": name, "EXTRA": _extra_params(name, env_probe), "LOG": []}
    env_probe.close()
    exec(compile(source, "README.md (Ten lines)", "exec"), namespace)
    rounds = [info for info in namespace["LOG"]]
    assert 1 <= len(rounds) <= PRESETS["tiny"]["max_rounds"]
    assert namespace["terminated"] or namespace["truncated"]


def test_make_binds_pow_d_to_the_env_and_checks_what_it_is_given():
    env = gym.make("fedsel/FedSelect-Tiny-v0")
    obs, _ = env.reset(seed=0)
    spec = env.unwrapped.selection_spec
    unbound = agents.make("pow_d", spec, seed=0)
    with pytest.raises(ValueError, match="bind it to the env first"):
        unbound.predict(obs)
    bound = agents.make("pow_d", env=env, seed=0)  # the wrapped env: bound to env.unwrapped
    action, _ = bound.predict(obs)
    assert np.asarray(action).shape == (spec.num_clients,)
    with pytest.raises(ValueError, match="give the problem as spec="):
        agents.make("random")
    other = gym.make("fedsel/FedSelect-v0").unwrapped.selection_spec  # N = 20, not 8
    with pytest.raises(ValueError, match="spec is for N = 20.*env= has N = 8"):
        agents.make("random", other, env=env)


# -- the training log's first line ---------------------------------------------------------------------------

def test_training_log_says_what_a_step_is(tmp_path, capsys):
    from agents.training.envs import steps_note

    note = steps_note(make_config(preset="dqn"), 2)
    assert re.search(r"one step = one client picked, counted as 0\.2 of a round.*ep_len_mean counts picks", note)
    assert "counts rounds" in steps_note(make_config(preset="ppo"), 1)
    import train_agent

    train_agent.main(["--algo", "dqn", "--env", "tiny", "-n", "4", "--eval-freq", "0", "--runs-dir", str(tmp_path),
                      "--no-progress-bar", "--hyperparams", "learning_starts=100"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("action_mode 'one': one step = one client picked")
