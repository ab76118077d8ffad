"""rl-zoo3 reads configs/ and trains FAVOR and DQN on FedSelect, Optuna searches fedsel's space, train_agent.py
takes rl-zoo3's flags, and every training run logs the FL metrics to TensorBoard.

rl-zoo3 runs in subprocesses, as its users run it (importing rl_zoo3 also patches Gymnasium's TimeLimit for
the whole process, which the rest of the suite should not inherit).
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import fedsel_env  # noqa: F401  (registers the env ids)
from agents.deploy import trainable_algorithms
from agents.training.algorithms import check_action_mode
from agents.training.cli import parse_key_values
from agents.training.hyperparams import CONFIG_DIR, load_hyperparams
from fedsel_env.config import ENV_IDS, make_config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from test_train_agent import QUIET, train_agent  # noqa: E402  (the script, loaded once)

FL_SCALARS = ("fl/final_accuracy", "fl/jain_index", "fl/clock_s")


def _scalars(tb_dir: Path) -> dict:
    """Every scalar of the TensorBoard event files under ``tb_dir``: tag → [values]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict = {}
    for events in glob.glob(str(tb_dir / "**" / "events.out.tfevents.*"), recursive=True):
        acc = EventAccumulator(events)
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend(e.value for e in acc.Scalars(tag))
    return out


def _zoo(args: list, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python -m <module> ARGS`` in ``cwd`` (one torch thread) and fail with its output if it fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", *args, "--num-threads", "1", "--verbose", "0"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


# -- configs/ as rl-zoo3 reads them ------------------------------------------------------------------------

#: the designs of the trainer registry (agents/training/trainers.py): their configs hold the trainer's own settings
DESIGN_CONFIGS = ("set_es", "set_es_q", "set_distill", "set_distill_cover")


@pytest.mark.parametrize("path", sorted(p for p in CONFIG_DIR.glob("*.yml") if p.stem not in DESIGN_CONFIGS),
                         ids=lambda p: p.name)
def test_every_config_entry_is_an_rl_zoo3_entry(path):
    """Keyed by env id (a FedSelect-Bench scenario's id included), env settings under rl-zoo3's env_kwargs (not the
    older env_config), each entry's env_kwargs a valid config of that env in a mode the algorithm acts in, every
    other key the algorithm's."""
    from fedsel_env.bench import BENCH_IDS
    from fedsel_env.config import resolve_env

    algo = path.stem
    table = yaml.safe_load(path.read_text())
    assert set(table) <= set(ENV_IDS.values()) | set(BENCH_IDS) | {"default"}
    for env_id, entry in table.items():
        assert "env_config" not in entry and isinstance(entry["env_kwargs"], dict), env_id
        assert entry["callback"] == "agents.training.callbacks.FLMetricsCallback"
        preset, over = resolve_env(env_id) if env_id in BENCH_IDS else (
            {v: k for k, v in ENV_IDS.items()}.get(env_id, "default"), {})
        cfg = make_config({**over, **entry["env_kwargs"]}, preset=preset)  # what gym.make(env_id, **env_kwargs) builds
        check_action_mode(algo, cfg["action_mode"])
        load_hyperparams(algo, env_id)  # every key an argument of the algorithm or one of rl-zoo3's


@pytest.mark.parametrize("design", DESIGN_CONFIGS)
def test_every_design_config_entry_is_a_valid_run_of_its_trainer(design):
    """configs/<design>.yml: every entry (keyed by a bench scenario's id, a registered scenario family's
    ``family:<Name>``, or default) a valid run of the design."""
    from agents.training import trainers
    from fedsel_env.bench import BENCH_IDS
    from fedsel_env.families import FAMILIES, PREFIX

    table = yaml.safe_load((CONFIG_DIR / f"{design}.yml").read_text())
    assert "default" in table and set(table) <= set(BENCH_IDS) | {PREFIX + f for f in FAMILIES} | {"default"}
    for key in table:
        entry = trainers.trainer(design)
        entry.check(key if key != "default" else "Churn", 0, trainers.load_settings(design, key if key != "default"
                                                                                    else "Churn"))


def test_env_config_is_read_as_an_alias_of_env_kwargs(tmp_path):
    old = tmp_path / "old.yml"
    old.write_text("default:\n  n_timesteps: 10\n  env_config: {action_mode: one, observation: flat, max_rounds: 3}\n")
    hp = load_hyperparams("dqn", "fedsel/FedSelect-Tiny-v0", conf_file=str(old))
    assert hp["env_kwargs"] == {"action_mode": "one", "observation": "flat", "max_rounds": 3} and "env_config" not in hp
    setup = train_agent.prepare(train_agent.parse_args(["--algo", "dqn", "--env", "tiny", "-conf", str(old),
                                                        "-f", str(tmp_path)]))
    assert setup["env_config"]["max_rounds"] == 3
    old.write_text("default:\n  env_kwargs: {max_rounds: 4}\n  env_config: {max_rounds: 3}\n")
    with pytest.raises(ValueError, match="both env_kwargs and env_config"):
        load_hyperparams("dqn", "fedsel/FedSelect-Tiny-v0", conf_file=str(old))


def test_a_run_folder_written_with_env_config_still_resumes(tmp_path):
    """hyperparams.yaml of runs started before the rename holds env_config: --resume reads it as before."""
    from agents.training.callbacks import FLMetricsCallback

    setup = train_agent.prepare(train_agent.parse_args(["--algo", "dqn", "--env", "tiny", "-f", str(tmp_path),
                                                        "--name", "old"]))
    hp = {("env_config" if k == "env_kwargs" else k): v for k, v in setup["hp"].items() if k != "callback"}
    (tmp_path / "old").mkdir()
    train_agent.save_settings(tmp_path / "old", setup["args"], setup["env_config"], hp)
    resumed = train_agent.prepare(train_agent.parse_args(["--resume", "--name", "old", "-f", str(tmp_path)]))
    assert resumed["kwargs"] == setup["kwargs"] and resumed["env_config"] == setup["env_config"]
    assert [type(c) for c in resumed["callbacks"]] == [FLMetricsCallback]


# -- train_agent.py takes rl-zoo3's flags ------------------------------------------------------------------

def test_train_agent_takes_rl_zoo3_flags(tmp_path):
    args = train_agent.parse_args(["--algo", "dqn", "--env", "tiny", "-n", "50", "-conf", str(CONFIG_DIR / "dqn.yml"),
                                   "-params", "learning_rate:1e-3", "policy_kwargs:dict(net_arch=[64])",
                                   "batch_size=16", "-f", str(tmp_path / "runs"), "--seed", "3", "--eval-freq", "10"])
    setup = train_agent.prepare(args)
    assert setup["args"].n_timesteps == 50 and setup["args"].seed == 3 and setup["args"].eval_freq == 10
    assert setup["run_dir"] == tmp_path / "runs" / "dqn_tiny_seed3"
    assert setup["hp"]["learning_rate"] == 0.001 and setup["hp"]["batch_size"] == 16
    assert setup["kwargs"]["policy_kwargs"] == {"net_arch": [64]}


def test_key_value_items_split_at_the_first_separator():
    assert parse_key_values(["a:1", "b=x:y", "c:{d: 1}", "e=1e-3", "f:lin_1e-3", "g=[1, 2]"], "hyperparams") == {
        "a": 1, "b": "x:y", "c": {"d": 1}, "e": 0.001, "f": "lin_1e-3", "g": [1, 2]}
    with pytest.raises(ValueError, match=r"--hyperparams expects KEY=VALUE \(or rl-zoo3's KEY:VALUE\)"):
        parse_key_values(["gamma"], "hyperparams")


# -- FL metrics in TensorBoard -----------------------------------------------------------------------------

def test_training_writes_the_fl_metrics_to_tensorboard(tmp_path):
    """favor+ on tiny: one client a step counted as 1/K = 1/3 of a round, so rounds to target are thirds."""
    run = train_agent.main(["--algo", "favor+", "--env", "tiny", "-n", "80", "--eval-freq", "0", "--save-freq", "0",
                            "--env-kwargs", "target_accuracy=0.12", "-params", "learning_starts:1000",
                            "-f", str(tmp_path), *QUIET])
    scalars = _scalars(run / "tb")
    for tag in FL_SCALARS:
        assert scalars.get(tag), f"{tag} not logged: {sorted(scalars)}"
    assert all(0 <= a <= 1 for a in scalars["fl/final_accuracy"])
    assert all(0 < j <= 1 for j in scalars["fl/jain_index"]) and all(c > 0 for c in scalars["fl/clock_s"])
    rounds = scalars["fl/rounds_to_target"]  # means over the episodes between two dumps: multiples of 1/3 / n
    assert rounds and all(0 < r <= 5 for r in rounds)
    assert any(abs(r * 3 - round(r * 3)) > 1e-3 or round(r * 3) % 3 for r in rounds)  # not whole rounds only
    assert scalars.get("fl/time_to_target_s")


def test_fl_metrics_callback_from_a_config_is_not_doubled():
    from agents.training.callbacks import FLMetricsCallback, config_callbacks

    assert [type(c) for c in config_callbacks(None)] == [FLMetricsCallback]
    assert [type(c) for c in config_callbacks("agents.training.callbacks.FLMetricsCallback")] == [FLMetricsCallback]
    with pytest.raises(ValueError, match="'agents.nowhere.Callback' does not import"):
        config_callbacks(["agents.nowhere.Callback"])
    with pytest.raises(ValueError, match="is not an SB3 callback class"):
        config_callbacks({"agents.training.callbacks.per_call": {}})


# -- rl-zoo3 itself ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_rl_zoo3_trains_dqn_from_configs_and_logs_the_fl_metrics(tmp_path):
    """The command of issue #16, verbatim but for a short run: rl-zoo3's own train script, configs/dqn.yml."""
    pytest.importorskip("rl_zoo3", reason="the optional extra 'zoo' is not installed: pip install '.[zoo]'")
    _zoo(["rl_zoo3.train", "--algo", "dqn", "--env", "fedsel/FedSelect-Tiny-v0", "--gym-packages", "fedsel_env",
          "-conf", str(CONFIG_DIR / "dqn.yml"), "-n", "60", "-f", "logs", "-tb", "tb", "--seed", "0"], tmp_path)
    assert (tmp_path / "logs/dqn/fedsel-FedSelect-Tiny-v0_1/fedsel-FedSelect-Tiny-v0.zip").is_file()
    saved = yaml.safe_load((tmp_path / "logs/dqn/fedsel-FedSelect-Tiny-v0_1/fedsel-FedSelect-Tiny-v0/config.yml")
                           .read_text().replace("!!python/object/apply:collections.OrderedDict", ""))
    assert dict(map(tuple, saved[0]))["env_kwargs"] == {  # the entry's env_kwargs made the env
        "action_mode": "one", "federation_seed": 0, "flat_parts": ["weights"], "observation": "flat"}
    scalars = _scalars(tmp_path / "tb")
    assert all(scalars.get(tag) for tag in FL_SCALARS), sorted(scalars)


@pytest.mark.slow
def test_zoo_optimizes_favor_in_fedsels_search_space(tmp_path):
    """python -m agents.training.zoo: --algo favor with configs/favor.yml (the default -conf), 2 Optuna trials
    of 60 steps; both complete (a trial whose evaluation env were not the entry's would be pruned)."""
    pytest.importorskip("rl_zoo3", reason="the optional extra 'zoo' is not installed: pip install '.[zoo]'")
    import pandas as pd

    from agents.training.zoo import NET_ARCHS

    _zoo(["agents.training.zoo", "--algo", "favor", "--env", "fedsel/FedSelect-Tiny-v0", "-optimize",
          "--n-trials", "2", "--sampler", "random", "--pruner", "none", "-n", "60", "--n-evaluations", "1",
          "--eval-episodes", "1", "--no-optim-plots", "-f", "logs", "--seed", "0"], tmp_path)
    (report,) = (tmp_path / "logs" / "favor").glob("report_fedsel-FedSelect-Tiny-v0_2-trials-60-random-none_*.csv")
    trials = pd.read_csv(report)
    assert list(trials["state"]) == ["COMPLETE", "COMPLETE"]
    assert trials["params_gamma"].isin([0.5, 0.75, 0.9, 0.95, 0.99]).all()
    assert trials["params_target_update_interval"].between(50, 2000).all()
    assert trials["params_net_arch"].astype(str).isin(NET_ARCHS).all()


def test_search_space_gives_arguments_of_the_algorithm():
    optuna = pytest.importorskip("optuna", reason="the optional extra 'zoo' (which brings optuna) is not "
                                                  "installed: pip install '.[zoo]'")

    from agents.favor import DoubleDQN
    from agents.training.hyperparams import accepted_arguments
    from agents.training.zoo import sample_fedsel_dqn_params, with_default_conf

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(5):
        kwargs = sample_fedsel_dqn_params(study.ask())
        assert set(kwargs) <= accepted_arguments(DoubleDQN)
        assert kwargs["policy_kwargs"]["net_arch"] in ([256], [512], [256, 256]) and 0.5 <= kwargs["gamma"] < 1
    assert with_default_conf(["--algo", "favor+"])[-2:] == ["-conf", str(CONFIG_DIR / "favor+.yml")]
    assert with_default_conf(["--algo", "favor", "-conf", "mine.yml"]) == ["--algo", "favor", "-conf", "mine.yml"]
    assert {"favor", "favor+"} <= set(trainable_algorithms())  # train_agent.py's names, the same in rl-zoo3
