"""A training run's settings, worked out and checked before anything is built: :func:`prepare` (an SB3 algorithm; a
design of the trainer registry has ``agents.training.trainers.prepare_design``).

Steps 2 and 3 of ``train_agent.py`` (the env config: preset / env id / YAML file, the algorithm's
``env_kwargs``, ``--env-kwargs``, checked against what the algorithm can act in; the hyper-parameters:
``configs/<algo>.yml`` then ``--hyperparams``), the run folder, the learner's device and the callbacks the
entry names. ``train_agent.py`` and the experiments' training (``experiments/common.py``) call it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from fedsel_env.config import env_id, resolve_env
from fedsel_env.sim.device import resolve_device

from .algorithms import check_algo
from .callbacks import config_callbacks
from .cli import Args, check_counts, parse_key_values
from .envs import build_env_config
from .hyperparams import check_policy, load_hyperparams, model_kwargs
from .runs import check_new_run, default_run_name, resumed_settings


def _scenario_id(env: str) -> list:
    """``[fedsel/Bench-<Name>-v0]`` when ``--env`` names a registered scenario (by name or id), else ``[]``."""
    from fedsel_env.bench import BENCH_IDS, SCENARIOS

    name = BENCH_IDS.get(env, env)
    return [SCENARIOS[name].env_id] if isinstance(name, str) and name in SCENARIOS else []


def _has_entry(algo: str, key: str, conf_file: Optional[str]) -> bool:
    """Whether the algorithm's hyper-parameter file (``configs/<algo>.yml`` or ``--conf-file``) has an entry ``key``."""
    from .hyperparams import CONFIG_DIR, read_yaml

    if conf_file is None and ":" in algo:
        return False
    table = read_yaml(Path(conf_file) if conf_file else CONFIG_DIR / f"{algo}.yml", "hyper-parameter file") or {}
    return isinstance(table, dict) and key in table


def prepare(args: Args) -> Dict[str, Any]:
    """Check every argument and work out the run's settings before anything is built (fails fast)."""
    check_algo(args.algo)
    run_dir = Path(args.runs_dir) / (args.name or "")
    if args.resume:  # the run's own settings, as saved when it started
        args, env_config, hp = resumed_settings(args)
    else:
        preset, overrides = resolve_env(args.env)  # 2. the env: preset / env id / YAML file
        own = _scenario_id(args.env)
        keys = [*own, env_id(preset)]  # a bench scenario's own entry first (its budget), rl-zoo3 style
        hp = load_hyperparams(args.algo, keys, args.hyperparams, args.conf_file)  # 3. hyper-parameters
        if own and _has_entry(args.algo, own[0], args.conf_file):
            # the scenario's own entry in configs/<algo>.yml is more specific than the id's registered config: its
            # env_kwargs override the id's, as gym.make(id, **env_kwargs) does in rl-zoo3 (e.g. FAVOR's reward for
            # the leaderboard's SB3 rows trained before the Bench ids took the objective); --env-kwargs override both
            overrides.update(hp.get("env_kwargs") or {})
        overrides.update(parse_key_values(args.env_kwargs, "env-kwargs"))
        if args.device is not None:  # --device: the simulator's device, and the learner's below
            overrides["device"] = args.device
        env_config = build_env_config(args.algo, preset, overrides, hp.get("env_kwargs") or {})
        args.name = args.name or default_run_name(args.algo, args.env, args.seed)
        run_dir = Path(args.runs_dir) / args.name
        check_new_run(run_dir)
    if args.n_timesteps is None:
        args.n_timesteps = int(hp.get("n_timesteps", 10_000))
    if args.n_envs is None:
        args.n_envs = int(hp.get("n_envs", 1))
    check_counts(args)
    # CUDA asked for where torch sees none fails here, before any env process starts; the learner follows the env
    device = resolve_device(env_config.get("device", "cpu"), env_config.get("workers", 1))
    args.device = args.device or str(device)
    if env_config.get("reward") == "vector":
        raise ValueError("reward: vector gives a vector reward (MO-Gymnasium's convention) and Stable-Baselines3 "
                         "trains on a scalar one: use a scalar reward (favor, accuracy_gain, time_penalised), or "
                         "scalarise the vector in your own script with mo_gymnasium.wrappers.LinearReward")
    policy = check_policy(hp, env_config)
    kwargs = model_kwargs(hp)  # parses schedules and policy_kwargs: errors surface now
    k_kwarg = getattr(policy, "clients_per_round_kwarg", None)  # a K-of-N policy (Plackett-Luce) is told K
    if k_kwarg is not None:
        kwargs["policy_kwargs"] = {**kwargs.get("policy_kwargs", {}), k_kwarg: int(env_config["clients_per_round"])}
    callbacks = config_callbacks(hp.get("callback"))  # FLMetricsCallback and those the entry names
    return {"args": args, "run_dir": run_dir, "env_config": env_config, "hp": hp, "policy": policy, "kwargs": kwargs,
            "callbacks": callbacks}


__all__ = ["prepare"]
