"""Train a client-selection agent on FedSelect: FAVOR's Double DQN (docs/SPEC.md §4) or a Stable-Baselines3 algorithm.

    .venv/bin/python train_agent.py --algo favor --env default                 # FAVOR on the default preset
    .venv/bin/python train_agent.py --algo favor --env fedsel/FedSelect-Tiny-v0 --n-timesteps 400 --n-envs 2
    .venv/bin/python train_agent.py --algo ppo --env my_federation.yaml        # any YAML env config
    .venv/bin/python train_agent.py --algo favor --env default --name run1 --resume   # continue an interrupted run

The script reads top to bottom (CleanRL style); the machinery lives in :mod:`agents.training`:
1. the arguments (:class:`~agents.training.cli.Args`);
2. the env config: the preset / env id / YAML file (``fedsel_env.config.resolve_env``), the algorithm's
   own ``env_kwargs`` from its hyper-parameter file, then ``--env-kwargs``; checked against what the
   algorithm can act in;
3. the hyper-parameters: ``configs/<algo>.yml``, keyed by env id as in rl-zoo3, then ``--hyperparams``;
4. the training envs (``SubprocVecEnv`` when ``--n-envs`` > 1, one torch thread per worker);
5. the model, new or resumed from the run's last checkpoint (model + replay buffer + step count);
6. the callbacks: evaluation of the *deployed* form (FAVOR: the ``topk`` agent taking the K highest
   Q-values; logged as mean return, success rate and rounds to the target), checkpoints, each training
   episode's FL metrics (``fl/`` in TensorBoard) and any the hyper-parameters' ``callback`` names;
7. ``learn`` with TensorBoard logs and a progress bar;
8. the final model, saved with the exact env config beside it.

Everything goes to ``runs/train/<name>/``; every file is written atomically (temp file + ``os.replace``).
Training randomness: ``--seed`` is given to SB3, which seeds its own generators (and, as SB3 does,
Python's, NumPy's and torch's global ones — this script is the top-level program); the envs derive
theirs from ``reset(seed)``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

if __name__ == "__main__":  # restart under tcmalloc before the heavy imports below (docs/PERFORMANCE.md)
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()  # a CNN round runs 1.2-1.4x faster under tcmalloc

import torch

from agents.training import cli
from agents.training.algorithms import algorithm_class, check_algo, deploy_fn, eval_env_config, is_off_policy
from agents.training.atomic import atomic_save, atomic_write_yaml, lock_run_folder
from agents.training.callbacks import AtomicCheckpointCallback, DeployedEvalCallback, config_callbacks, per_call
from agents.training.cli import Args, check_counts, parse_key_values
from agents.training.envs import build_env_config, close_envs, make_eval_env, make_vec_env, steps_note
from agents.training.hyperparams import check_policy, load_hyperparams, model_kwargs
from agents.training.runs import (CKPT_PREFIX, check_new_run, default_run_name, resume_model, resumed_settings,
                                  save_settings)
from fedsel_env.config import env_id, resolve_env
from fedsel_env.sim.device import resolve_device


def parse_args(argv: Optional[Sequence[str]] = None) -> Args:
    """The command line as :class:`~agents.training.cli.Args` (``--help`` lists the flags)."""
    return cli.parse_args(argv, description=__doc__.split("\n")[0])


def prepare(args: Args) -> Dict[str, Any]:
    """Check every argument and work out the run's settings before anything is built (fails fast)."""
    check_algo(args.algo)
    run_dir = Path(args.runs_dir) / (args.name or "")
    if args.resume:  # the run's own settings, as saved when it started
        args, env_config, hp = resumed_settings(args)
    else:
        preset, overrides = resolve_env(args.env)  # 2. the env: preset / env id / YAML file
        hp = load_hyperparams(args.algo, env_id(preset), args.hyperparams, args.conf_file)  # 3. hyper-parameters
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
    callbacks = config_callbacks(hp.get("callback"))  # FLMetricsCallback and those the entry names
    return {"args": args, "run_dir": run_dir, "env_config": env_config, "hp": hp, "policy": policy, "kwargs": kwargs,
            "callbacks": callbacks}


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Train as ``argv`` says; return the run folder."""
    args = parse_args(argv)
    setup = prepare(args)  # ValueError on any bad argument, before any env or process is started
    with lock_run_folder(setup["run_dir"], "train_agent.py"):  # one writer per run folder: a second is refused
        return train(setup)


def train(setup: Dict[str, Any]) -> Path:
    """Build the envs and the model (new or resumed), learn, save; ``setup`` is :func:`prepare`'s."""
    args, run_dir, env_config, hp = setup["args"], setup["run_dir"], setup["env_config"], setup["hp"]
    if args.verbose:  # the log's first line: SB3's step and episode length against FL rounds
        print(steps_note(env_config, args.n_envs), flush=True)
    torch.set_num_threads(args.torch_threads)
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    if not args.resume:
        save_settings(run_dir, args, env_config, hp)

    # 4. envs: training (the algorithm's mode) and evaluation (the deployed form, one env in this process)
    env = make_vec_env(env_config, args.n_envs, args.vec_env)
    eval_env = make_eval_env(eval_env_config(args.algo, env_config))
    spec = eval_env.envs[0].unwrapped.selection_spec

    try:  # the envs' worker processes are closed however this ends (a damaged checkpoint, Ctrl-C, an error)
        # 5. model: the last checkpoint with its replay buffer and step count, or a new one
        model = resume_model(args, env, run_dir)
        resumed = model is not None
        if not resumed:
            model = algorithm_class(args.algo)(setup["policy"], env, seed=args.seed, device=args.device,
                                               verbose=args.verbose, tensorboard_log=str(run_dir / "tb"),
                                               **setup["kwargs"])

        # 6. callbacks (frequencies are in env steps; a callback call is one step of all n_envs envs)
        eval_cb = DeployedEvalCallback(eval_env, deploy_fn(args.algo, env_config, spec),
                                       eval_seed=args.seed + 10_000, n_eval_episodes=args.eval_episodes,
                                       eval_freq=per_call(args.eval_freq, args.n_envs), log_path=str(run_dir),
                                       best_model_save_path=str(run_dir), verbose=args.verbose)
        ckpt_cb = AtomicCheckpointCallback(save_freq=per_call(args.save_freq, args.n_envs),
                                           save_path=str(run_dir / "checkpoints"), name_prefix=CKPT_PREFIX,
                                           save_replay_buffer=is_off_policy(args.algo), keep=args.keep_checkpoints)
        if args.resume:
            eval_cb.restore(run_dir / "evaluations.npz", upto=model.num_timesteps)

        # 7. learn (on resume, only the remaining steps; counters, schedules and the buffer carry on)
        remaining = args.n_timesteps - model.num_timesteps
        start = time.perf_counter()
        try:
            if remaining > 0:
                model.learn(total_timesteps=remaining, callback=[eval_cb, ckpt_cb, *setup["callbacks"]],
                            progress_bar=args.progress_bar, tb_log_name=args.algo.upper(),
                            reset_num_timesteps=not resumed)
        except KeyboardInterrupt:
            path = ckpt_cb.save_on_interrupt(model)
            print(f"\nInterrupted at step {model.num_timesteps}: checkpoint {path}; continue with "
                  f"`.venv/bin/python train_agent.py --name {args.name} --runs-dir {args.runs_dir} --resume`")
            raise SystemExit(130)
        elapsed = time.perf_counter() - start

        # 8. the final model with its env config beside it (env_config.yaml, written at the start)
        atomic_save(model.save, run_dir / "model.zip")
        atomic_write_yaml(run_dir / "summary.yaml", {
            "algo": args.algo, "env": args.env, "num_timesteps": int(model.num_timesteps), "n_envs": args.n_envs,
            "train_seconds_this_call": round(elapsed, 2),
            "best_eval_mean_reward": float(eval_cb.best_mean_reward), "model": "model.zip",
            "env_config": "env_config.yaml"})
    finally:
        close_envs(env, eval_env)
    if args.verbose:
        print(f"Saved {run_dir / 'model.zip'} after {model.num_timesteps} steps ({elapsed:.1f} s)")
    return run_dir


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"train_agent.py: error: {e}")
