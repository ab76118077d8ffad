"""train_agent.py: a short FAVOR run gives a deployable top-K agent; --resume loses nothing; bad arguments fail fast."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

import fedsel_env  # noqa: F401  (registers the env ids)
from agents.favor import DoubleDQN, FavorAgent, deployment_config

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


def _load_script():
    if str(ROOT) not in sys.path:  # the script and the packages it imports (agents.training) live at the root
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("train_agent", ROOT / "train_agent.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_agent"] = module
    spec.loader.exec_module(module)
    return module


train_agent = _load_script()
QUIET = ["--no-progress-bar", "--verbose", "0"]
# a few hundred steps on the tiny preset, fast settings (learning starts after 8 episodes of 5 rounds)
FAST = ["--hyperparams", "learning_starts=40", "batch_size=16", "policy_kwargs={net_arch: [64]}"]


#: run folder -> the episodes its training envs began: (num_timesteps, env index, how it began)
EPISODES_BEGUN = {}


def _record_episodes(mp: pytest.MonkeyPatch, log: list) -> None:
    """Log every episode the training envs begin, as the learner's stream tracker sees it."""
    from agents.training.stream import START_KEY, StreamTracker

    start, step = StreamTracker.start, StreamTracker.step

    def logged_start(self, model, vec_env):
        fresh = getattr(model, "episode_stream", None) is None  # (a resumed run goes on with its episodes)
        start(self, model, vec_env)
        if fresh:
            log.extend((model.num_timesteps, i, e["start"]) for i, e in enumerate(model.episode_stream["envs"]))

    def logged_step(self, model, vec_env, local_vars):
        step(self, model, vec_env, local_vars)
        log.extend((model.num_timesteps, i, vec_env.reset_infos[i][START_KEY])
                   for i, done in enumerate(local_vars["dones"]) if done)

    mp.setattr(StreamTracker, "start", logged_start)
    mp.setattr(StreamTracker, "step", logged_step)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 200-step FAVOR run on the tiny preset with two worker processes, checkpointing every 100 steps."""
    runs = tmp_path_factory.mktemp("runs")
    log = []
    with pytest.MonkeyPatch.context() as mp:
        _record_episodes(mp, log)
        run_dir = train_agent.main(["--algo", "favor", "--env", "tiny", "--n-timesteps", "200", "--n-envs", "2",
                                    "--eval-freq", "100", "--eval-episodes", "1", "--save-freq", "100",
                                    "--runs-dir", str(runs), "--name", "t", *FAST, *QUIET])
    EPISODES_BEGUN[run_dir] = log
    return run_dir


def test_short_run_saves_model_with_its_env_config(tiny_run):
    for name in ("model.zip", "env_config.yaml", "hyperparams.yaml", "args.yaml", "evaluations.npz", "summary.yaml"):
        assert (tiny_run / name).is_file(), name
    cfg = yaml.safe_load((tiny_run / "env_config.yaml").read_text())
    assert cfg == fedsel_env.make_config(cfg)  # a complete, valid config, exactly as trained
    assert (cfg["action_mode"], cfg["observation"], cfg["flat_parts"]) == ("one", "flat", ["weights"])
    assert cfg["num_clients"] == fedsel_env.PRESETS["tiny"]["num_clients"]
    model = DoubleDQN.load(tiny_run / "model.zip")
    assert model.num_timesteps == 200
    assert model.policy.q_net.q_net[0].out_features == 64  # the --hyperparams override took effect
    with np.load(tiny_run / "evaluations.npz") as ev:
        assert ev["timesteps"].tolist() == [100, 200]
    assert list((tiny_run / "tb").iterdir())  # TensorBoard events


def test_trained_model_selects_k_distinct_available_clients_in_topk(tiny_run):
    cfg = deployment_config(yaml.safe_load((tiny_run / "env_config.yaml").read_text()))
    env = gym.make("fedsel/FedSelect-Tiny-v0", config=cfg)
    agent = FavorAgent.load(tiny_run / "model.zip", env.unwrapped.selection_spec)
    k = env.unwrapped.selection_spec.clients_per_round
    obs, _ = env.reset(seed=3)
    done, rounds = False, 0
    while not done:
        available = env.unwrapped.action_masks()
        action, _ = agent.predict(obs, deterministic=True)
        chosen = np.argsort(-action)[: min(k, available.sum())]
        assert len(set(chosen.tolist())) == len(chosen)
        assert available[chosen].all()
        obs, _, terminated, truncated, info = env.step(action)
        assert sorted(info["selected"]) == sorted(chosen.tolist())  # the env took exactly those
        done, rounds = terminated or truncated, rounds + 1
    assert rounds >= 1


def test_resume_continues_from_the_checkpoint_with_nothing_lost(tiny_run, tmp_path):
    import shutil

    run = tmp_path / "t"
    shutil.copytree(tiny_run, run)
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("*.zip")) == ["ckpt_100_steps.zip", "ckpt_200_steps.zip"]
    # the run "died" after the checkpoint at step 100
    for p in list(ckpts.glob("*200*")) + [run / "model.zip"]:
        p.unlink()
    at_100 = DoubleDQN.load(ckpts / "ckpt_100_steps.zip")
    assert at_100.num_timesteps == 100 and at_100._n_updates == 100 // 2 - 40 // 2
    train_agent.main(["--name", "t", "--runs-dir", str(tmp_path), "--resume", "--n-timesteps", "300", *QUIET])
    final = DoubleDQN.load(run / "model.zip")
    assert final.num_timesteps == 300
    # one gradient step per call of the two envs after learning_starts: nothing skipped, nothing repeated
    assert final._n_updates == 300 // 2 - 40 // 2
    last = DoubleDQN.load(ckpts / "ckpt_300_steps.zip")
    last.load_replay_buffer(ckpts / "ckpt_replay_buffer_300_steps.pkl")
    assert last.replay_buffer.pos == 300 // 2  # every transition of both envs kept across the resume
    with np.load(run / "evaluations.npz") as ev:
        assert ev["timesteps"].tolist() == [100, 200, 300]  # the eval history was taken up
    assert [p.name for p in (run / "tb").iterdir()] == ["FAVOR_1"]  # one TensorBoard run, continued


def _checkpoint(path: Path):
    from agents.training.runs import replay_buffer_path

    model = DoubleDQN.load(path)
    model.load_replay_buffer(replay_buffer_path(path))
    return model


def test_interrupted_and_resumed_run_is_the_uninterrupted_run(tiny_run, tmp_path, monkeypatch):
    """Issue #15, items 4-5: resumed from its checkpoint at step 100, stopped by Ctrl-C at step 140 and
    resumed again, the run plays the episodes the uninterrupted run played (not its first ones again),
    explores, stores and learns exactly as it did, and evaluates at the same steps (100 and 200, not 240)."""
    import shutil

    from agents.training.callbacks import AtomicCheckpointCallback

    run = tmp_path / "t"
    shutil.copytree(tiny_run, run)
    for p in list((run / "checkpoints").glob("*200*")) + [run / "model.zip", run / "summary.yaml"]:
        p.unlink()  # the run "died" after its checkpoint at step 100, before its evaluation at 200
    with np.load(run / "evaluations.npz") as ev:
        np.savez(run / "evaluations.npz", **{k: ev[k][:1] for k in ev.files})
    log = []
    _record_episodes(monkeypatch, log)
    rollout_start = AtomicCheckpointCallback._on_rollout_start

    def ctrl_c_at_140(self):
        if self.model.num_timesteps == 140:
            raise KeyboardInterrupt
        rollout_start(self)

    monkeypatch.setattr(AtomicCheckpointCallback, "_on_rollout_start", ctrl_c_at_140)
    with pytest.raises(SystemExit) as stopped:
        train_agent.main(["--name", "t", "--runs-dir", str(tmp_path), "--resume", *QUIET])
    assert stopped.value.code == 130 and (run / "checkpoints" / "ckpt_140_steps.zip").is_file()
    monkeypatch.setattr(AtomicCheckpointCallback, "_on_rollout_start", rollout_start)
    train_agent.main(["--name", "t", "--runs-dir", str(tmp_path), "--resume", *QUIET])

    # the same episodes (how each began: its seeds), in the same envs, at the same steps
    begun_after_100 = [e for e in EPISODES_BEGUN[tiny_run] if e[0] > 100]
    assert len(begun_after_100) >= 4 and log == begun_after_100
    # the same transitions (observations, actions: the exploration; rewards), updates and network
    full, resumed = _checkpoint(tiny_run / "checkpoints" / "ckpt_200_steps.zip"), \
        _checkpoint(run / "checkpoints" / "ckpt_200_steps.zip")
    assert resumed.replay_buffer.pos == full.replay_buffer.pos == 100
    for field in ("observations", "next_observations", "actions", "rewards", "dones"):
        np.testing.assert_array_equal(getattr(resumed.replay_buffer, field), getattr(full.replay_buffer, field))
    assert (resumed._n_updates, resumed.exploration_rate) == (full._n_updates, full.exploration_rate)
    for a, b in zip(resumed.policy.state_dict().values(), full.policy.state_dict().values()):
        assert torch.equal(a, b)
    # the evaluation schedule counts steps from the run's start: 100 (before the interruption), 200
    with np.load(run / "evaluations.npz") as got, np.load(tiny_run / "evaluations.npz") as want:
        assert got["timesteps"].tolist() == want["timesteps"].tolist() == [100, 200]
        np.testing.assert_array_equal(got["results"], want["results"])


def cut_member(zip_path: Path, member: str = "policy.pth") -> None:
    """Cut ``member`` of a zip to half its length, the zip itself staying valid (a partial copy)."""
    import zipfile

    with zipfile.ZipFile(zip_path) as z:
        items = {n: z.read(n) for n in z.namelist()}
    with zipfile.ZipFile(zip_path, "w") as z:
        for name, data in items.items():
            z.writestr(name, data[: len(data) // 2] if name == member else data)


def test_damaged_or_missing_checkpoint_files_name_the_file_and_the_fix(tiny_run, tmp_path):
    """Issue #15, item 7: a missing or truncated replay buffer, a policy.pth cut short inside a valid
    checkpoint zip: a ValueError naming the file and what to do, not FileNotFoundError('….pkl.pkl'),
    UnpicklingError, EOFError or torch's RuntimeError."""
    import shutil
    from types import SimpleNamespace

    from agents.training.runs import resume_model

    def resume(run):
        args = SimpleNamespace(resume=True, algo="favor", device="cpu", n_timesteps=200)
        return resume_model(args, None, run)

    cases = {
        "missing buffer": (lambda c: (c / "ckpt_replay_buffer_200_steps.pkl").unlink(),
                           r"replay buffer of checkpoint ckpt_200_steps.zip '.*ckpt_replay_buffer_200_steps\.pkl' "
                           r"does not exist; delete ckpt_200_steps.zip and ckpt_replay_buffer_200_steps.pkl .* to "
                           r"resume from the checkpoint before it, ckpt_100_steps.zip"),
        "truncated buffer": (lambda c: (c / "ckpt_replay_buffer_200_steps.pkl").write_bytes(
                                 (c / "ckpt_replay_buffer_200_steps.pkl").read_bytes()[:5000]),
                             r"cannot load the replay buffer .*ckpt_replay_buffer_200_steps\.pkl' \((UnpicklingError|EOFError)"),
        "policy.pth cut short": (lambda c: cut_member(c / "ckpt_200_steps.zip"),
                                 r"cannot load checkpoint '.*ckpt_200_steps\.zip' \(RuntimeError: .*\); delete"),
    }
    for name, (damage, message) in cases.items():
        run = tmp_path / name.replace(" ", "_")
        shutil.copytree(tiny_run, run)
        damage(run / "checkpoints")
        with pytest.raises(ValueError, match=message):
            resume(run)
        assert ".pkl.pkl" not in message
    # the only checkpoint damaged: the fix is to start again
    only = tmp_path / "only"
    shutil.copytree(tiny_run, only)
    for p in (only / "checkpoints").glob("*100*"):
        p.unlink()
    cut_member(only / "checkpoints" / "ckpt_200_steps.zip")
    with pytest.raises(ValueError, match="to resume from step 0, or start the run again under another --name"):
        resume(only)
    # the deployed agent reads the same kind of file
    shutil.copy(tiny_run / "model.zip", tmp_path / "model.zip")
    cut_member(tmp_path / "model.zip")
    spec = gym.make("fedsel/FedSelect-Tiny-v0").unwrapped.selection_spec
    with pytest.raises(ValueError, match=r"favor agent: model '.*model\.zip' \(RuntimeError.*copy it again"):
        FavorAgent.load(tmp_path / "model.zip", spec, env_config={"flat_parts": ["weights"]})


def test_hyperparameter_file_with_a_yaml_error_names_the_file_and_line(tmp_path):
    bad = tmp_path / "hp.yml"
    bad.write_text("default:\n  gamma: 0.9\n  policy_kwargs: {net_arch: [64\n")
    with pytest.raises(ValueError, match=r"hyper-parameter file '.*hp\.yml' is not valid YAML: .*line 4"):
        train_agent.prepare(train_agent.parse_args(["--conf-file", str(bad), "--runs-dir", str(tmp_path)]))
    bad.write_text("- gamma\n- 0.9\n")
    with pytest.raises(ValueError, match=r"hp\.yml' must map env ids"):
        train_agent.prepare(train_agent.parse_args(["--conf-file", str(bad), "--runs-dir", str(tmp_path)]))


def test_ppo_trains_in_topk_mode(tmp_path):
    run = train_agent.main(["--algo", "ppo", "--env", "fedsel/FedSelect-Tiny-v0", "--n-timesteps", "64",
                            "--eval-freq", "0", "--save-freq", "0", "--runs-dir", str(tmp_path), *QUIET])
    assert yaml.safe_load((run / "env_config.yaml").read_text())["action_mode"] == "topk"
    assert (run / "model.zip").is_file()


def _write(path: Path, data) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("argv, message", [
    (["--algo", "sarsa"], "unknown --algo 'sarsa'; registered trainers: ['a2c', 'dqn', 'favor'"),
    (["--env", "nowhere"], "unknown --env 'nowhere': give a preset"),
    (["--env", "missing.yaml"], "does not exist"),
    (["--algo", "dqn", "--env-kwargs", "action_mode=topk"], "cannot act in action_mode 'topk'"),
    (["--algo", "favor", "--env-kwargs", "action_mode=subset"], "Algorithms for 'subset': ['a2c', 'maskable_ppo', 'ppo']"),
    (["--env-kwargs", "observation=dict"], "favor needs observation: flat"),
    (["--algo", "ppo", "--env-kwargs", "observation=dict"], "use policy=MultiInputPolicy"),
    (["--env-kwargs", "num_clients=0"], "'num_clients'"),
    (["--env-kwargs", "clients"], "KEY=VALUE"),
    (["--hyperparams", "learning_rat=0.1"], "unknown hyper-parameter(s) ['learning_rat']"),
    (["--hyperparams", "learning_rate=fast"], "'lin_<number>'"),
    (["--hyperparams", "policy_kwargs=list(1)"], "policy_kwargs"),
    (["--n-envs", "0"], "--n-envs = 0"),
    (["--resume"], "--resume needs --name"),
    (["--resume", "--name", "never_ran"], "no run to continue"),
])
def test_bad_arguments_fail_before_anything_starts(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as e:
        train_agent.prepare(train_agent.parse_args([*argv, "--runs-dir", str(tmp_path)]))
    assert message in str(e.value)
    assert not any(tmp_path.iterdir())  # nothing written


def test_yaml_env_config_and_existing_run(tmp_path):
    path = _write(tmp_path / "fed.yaml", {"preset": "tiny", "max_rounds": 7, "action_mode": "topk"})
    with pytest.raises(ValueError, match="cannot act in action_mode 'topk'"):
        train_agent.prepare(train_agent.parse_args(["--env", path, "--runs-dir", str(tmp_path)]))
    path = _write(tmp_path / "fed.yaml", {"preset": "tiny", "max_rounds": 7})
    setup = train_agent.prepare(train_agent.parse_args(["--env", path, "--runs-dir", str(tmp_path)]))
    assert setup["env_config"]["max_rounds"] == 7 and setup["env_config"]["num_clients"] == 8
    assert setup["env_config"]["action_mode"] == "one"  # the default topk replaced by FAVOR's training mode
    assert setup["hp"]["n_timesteps"] == 2000  # the tiny preset's entry in configs/favor.yml
    (tmp_path / "favor_fed_seed0").mkdir()
    (tmp_path / "favor_fed_seed0" / "args.yaml").write_text("{}")
    with pytest.raises(ValueError, match="already exists: pass --resume"):
        train_agent.prepare(train_agent.parse_args(["--env", path, "--runs-dir", str(tmp_path)]))


@pytest.mark.slow
def test_command_line_reports_bad_arguments():
    out = subprocess.run([sys.executable, str(ROOT / "train_agent.py"), "--algo", "sarsa"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "train_agent.py: error: unknown --algo 'sarsa'" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("algo", ["favor+", "dqn"])
def test_default_preset_entries_train_as_documented(algo, tmp_path):
    """configs/{favor+,dqn}.yml's default-preset entries: one client a step counted as 1/K of a round, d = 5,
    γ = 0.9 (docs/TRAINING.md); deployment runs ordinary FedAvg rounds at the same d."""
    from agents.favor import deployment_config
    from fedsel_env.env import FedSelectEnv

    setup = train_agent.prepare(train_agent.parse_args(["--algo", algo, "--env", "default",
                                                        "--runs-dir", str(tmp_path)]))
    cfg = setup["env_config"]
    assert cfg["action_mode"] == "one" and cfg["one_mode_step"] == "1/K" and cfg["pca_components"] == 5
    assert setup["hp"]["gamma"] == 0.9
    train_env, deployed = FedSelectEnv(config=cfg), FedSelectEnv(config=deployment_config(cfg))
    assert train_env.server_step == 0.2 and train_env.max_steps == 5 * cfg["max_rounds"]
    assert deployed.server_step == 1.0 and deployed.pca_components == 5


def test_favor_entries_are_the_papers(tmp_path):
    """configs/favor.yml is FAVOR as the paper trains it (#17): the PCA weights only with d = min(100, N + 1),
    one whole client a round, w_0 and the basis fixed per federation, no masking; favor+ is the named variant."""
    from fedsel_env.env import FedSelectEnv

    for env in ("default", "tiny", "favor_fmnist"):
        setup = train_agent.prepare(train_agent.parse_args(["--algo", "favor", "--env", env,
                                                            "--runs-dir", str(tmp_path / env)]))
        cfg = setup["env_config"]
        assert cfg["flat_parts"] == ["weights"] and cfg["pca_components"] is None
        assert cfg["one_mode_step"] == 1.0 and cfg["init"] == "federation"
        assert setup["hp"]["mask_actions"] is False
    assert FedSelectEnv(preset="default").pca_components == 21  # d = min(100, N + 1) on the default preset
    plus = train_agent.prepare(train_agent.parse_args(["--algo", "favor+", "--env", "tiny",
                                                       "--runs-dir", str(tmp_path / "plus")]))
    assert plus["env_config"]["one_mode_step"] == "1/K" and plus["hp"]["mask_actions"] is True


def test_every_call_records_its_commit_and_machine(tmp_path):
    """machines.jsonl (issue #46): one line a train_agent.py call, a resumed run's too, naming the code's commit and
    the CPU and kernels the model was trained on, so a replay that does not match can tell rounding from code."""
    import json
    import subprocess

    import train_agent
    from agents.training.runs import MACHINES_FILE, read_machines

    run = train_agent.main(["--algo", "pl_ppo", "--env", "fedsel/FedSelect-Tiny-v0", "-n", "64", "--runs-dir",
                            str(tmp_path), "--name", "m", "--no-progress-bar", "--seed", "0", "--eval-freq", "0"])
    train_agent.main(["--runs-dir", str(tmp_path), "--name", "m", "--resume", "--n-timesteps", "128",
                      "--no-progress-bar"])
    calls = read_machines(run)
    assert len(calls) == 2
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(train_agent.__file__).parent, capture_output=True,
                          text=True).stdout.strip()
    for c in calls:
        assert c["commit"] == (head or None) and isinstance(c["dirty"], (bool, type(None)))
        assert c["cores"] >= 1 and c["torch"] and c["numpy"] and "cpu" in c
    with open(run / MACHINES_FILE, "a") as f:  # a line cut short by a kill: the calls before it stand
        f.write('{"commit": "ab')
    assert len(read_machines(run)) == 2
    assert json.loads((run / MACHINES_FILE).read_text().splitlines()[0])["utc"]
