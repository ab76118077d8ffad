"""The Stable-Baselines3 trainers (``train_agent.py --algo pc_dqn|pc_ppo|favor|favor+|pl_ppo|ppo|dqn|…``): steps 4-8
of ``train_agent.py`` after :func:`agents.training.settings.prepare` has worked out and checked the run's settings.

4. the training envs (``SubprocVecEnv`` when ``--n-envs`` > 1, one torch thread per worker; or the batched vector
   env); 5. the model, new or resumed from the run's last checkpoint (model + replay buffer + step count); 6. the
callbacks: evaluation of the *deployed* form, checkpoints, each training episode's FL metrics and any the
hyper-parameters' ``callback`` names; 7. ``learn`` with TensorBoard logs and a progress bar; 8. the final model,
saved with the exact env config beside it. The algorithms are Stable-Baselines3's (Raffin et al., "Stable-Baselines3:
Reliable Reinforcement Learning Implementations", JMLR 22(268), 2021) and FAVOR's Double DQN (docs/SPEC.md §4).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict

import torch

from .algorithms import algorithm_class, deploy_fn, eval_env_config, is_off_policy
from .atomic import atomic_save, atomic_write_yaml
from .callbacks import AtomicCheckpointCallback, DeployedEvalCallback, per_call
from .envs import close_envs, make_eval_env, make_vec_env, steps_note
from .runs import CKPT_PREFIX, resume_model, save_settings


def learn(setup: Dict[str, Any]) -> Path:
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
    if getattr(setup["policy"], "cover_features", False):  # kcenter_cover's state in the tokens (pl_ppo_cover)
        from agents.cover_tokens import CoverFeatures

        env = CoverFeatures(env, spec)

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


__all__ = ["learn"]
