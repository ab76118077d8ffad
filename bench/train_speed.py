"""How fast does FAVOR train, and is the trained agent useful? (issue #5; docs/SPEC.md §4, §6)

Part 1 (``speed``): training steps (= communication rounds) per second of FAVOR's Double DQN on the
default preset, learning from the first step (so each measurement includes the env rounds, the
replay buffer and the gradient steps of ``configs/favor.yml``), with 1 env in the learner's process
and with 2 ``SubprocVecEnv`` worker processes (one torch thread each); and the time of one gradient
step alone.

Part 2 (``full``): the wall time of a full FAVOR training run on the default preset, exactly as
``python train_agent.py --algo favor+ --env default`` (FAVOR+, the variant of configs/favor+.yml) runs it (its ``n_timesteps`` and ``n_envs`` from
``configs/favor.yml``), then the deployed top-K agent against uniform random selection
(``agents.make("random", spec)``) on the same federation and the same episode seeds (paired): mean
rounds to the target (an episode that misses it counts its whole budget), how often the target is
reached, and the mean return.

``eval RUN_DIR`` runs only the comparison for an existing run.

Usage:  python bench/train_speed.py speed [--steps 600]
        python bench/train_speed.py full [--episodes 20] [--n-timesteps N]
        python bench/train_speed.py eval runs/train/favor_default_seed0 [--episodes 20] [--model best_model.zip]
                                         [--mode one]
Results are printed and written to runs/bench/train_speed_<part>.json.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def _train_agent():
    spec = importlib.util.spec_from_file_location("train_agent", ROOT / "train_agent.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_agent"] = module
    spec.loader.exec_module(module)
    return module


def measure_speed(steps: int, warmup: int) -> Dict[str, Any]:
    """Steps/s of DoubleDQN training on the default preset with 1 and 2 envs."""
    ta = _train_agent()
    from agents.favor import DoubleDQN
    from agents.training.envs import make_vec_env

    setup = ta.prepare(ta.parse_args(["--algo", "favor+", "--env", "default", "--runs-dir", "/tmp/fedsel_bench"]))
    kwargs = dict(setup["kwargs"], learning_starts=0)
    out: Dict[str, Any] = {"preset": "default", "steps": steps, "warmup": warmup, "hyperparams": {
        k: v for k, v in setup["hp"].items() if k not in ("env_kwargs", "env_config", "callback")}, "rates": {}}
    for n_envs in (1, 2):
        env = make_vec_env(setup["env_config"], n_envs)
        model = DoubleDQN("MlpPolicy", env, seed=0, device="cpu", **kwargs)
        model.learn(total_timesteps=warmup)  # first resets, allocation, torch warm-up
        t = time.perf_counter()
        model.learn(total_timesteps=steps, reset_num_timesteps=False)
        rate = (model.num_timesteps - warmup) / (time.perf_counter() - t)
        env.close()
        out["rates"][f"{n_envs}_env"] = round(rate, 2)
        print(f"{n_envs} env(s): {rate:.1f} training steps/s  ({model._n_updates} gradient steps in all)")
        if n_envs == 1:  # the learner's share: gradient steps alone, on the buffer just filled
            t = time.perf_counter()
            model.train(gradient_steps=200, batch_size=model.batch_size)
            out["gradient_step_ms"] = round((time.perf_counter() - t) / 200 * 1000, 2)
            print(f"one gradient step (batch {model.batch_size}): {out['gradient_step_ms']:.1f} ms")
    return out


def compare_with_random(run_dir: Path, episodes: int, model_name: str = "model.zip",
                        first_seed: int = 1000, mode: str = "topk") -> Dict[str, Any]:
    """The FAVOR agent vs uniform random selection, paired on episode seeds.

    ``mode="topk"``: deployed (K clients a round); ``mode="one"``: the training regime (one client a round).
    """
    import yaml

    import agents
    from agents.favor import FavorAgent, deployment_config
    from fedsel_env.env import FedSelectEnv

    with open(run_dir / "env_config.yaml") as f:
        cfg = deployment_config(yaml.safe_load(f))
    cfg["action_mode"] = mode
    env = FedSelectEnv(config=cfg)
    spec = env.selection_spec
    favor = FavorAgent.load(run_dir / model_name, spec)
    rand = agents.make("random", spec)
    budget = env.max_steps  # the round budget in steps (one_mode_step < 1 makes a `one`-mode step part of a round)
    results: Dict[str, Dict[str, List[float]]] = {}
    for name, agent in (("favor", favor), ("random", rand)):
        rounds, reached, returns = [], [], []
        for i in range(episodes):
            seed = first_seed + i
            agent.seed(seed)
            obs, _ = env.reset(seed=seed)
            done, ret, n, start = False, 0.0, 0, True
            while not done:
                action, _ = agent.predict(obs, episode_start=np.array([start]))
                obs, r, terminated, truncated, info = env.step(action)
                done, ret, n, start = terminated or truncated, ret + r, n + 1, False
            rounds.append(n if terminated else budget)
            reached.append(bool(terminated))
            returns.append(ret)
        results[name] = {"rounds": rounds, "reached": reached, "returns": returns}
        print(f"{name:>7}: rounds to {cfg['target_accuracy']:.0%} = {np.mean(rounds):.1f} "
              f"(reached {sum(reached)}/{episodes}), return {np.mean(returns):.2f}")
    diff = np.asarray(results["favor"]["rounds"]) - np.asarray(results["random"]["rounds"])
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    summary = {
        "episodes": episodes, "seeds": [first_seed, first_seed + episodes - 1], "model": model_name, "mode": mode,
        "target_accuracy": cfg["target_accuracy"], "max_rounds": budget, "clients_per_round": spec.clients_per_round,
        "favor_mean_rounds": float(np.mean(results["favor"]["rounds"])),
        "random_mean_rounds": float(np.mean(results["random"]["rounds"])),
        "favor_reached": int(sum(results["favor"]["reached"])), "random_reached": int(sum(results["random"]["reached"])),
        "favor_mean_return": float(np.mean(results["favor"]["returns"])),
        "random_mean_return": float(np.mean(results["random"]["returns"])),
        "paired_rounds_difference": float(diff.mean()), "paired_rounds_difference_se": se,
        "favor_fewer_rounds": bool(diff.mean() < 0), "per_episode": results,
    }
    print(f"paired difference (favor - random): {diff.mean():+.2f} ± {se:.2f} rounds (standard error)")
    return summary


def full_run(episodes: int, n_timesteps: int | None, name: str) -> Dict[str, Any]:
    """A full training run as train_agent.py does it, timed, then compared with random selection."""
    ta = _train_agent()
    runs = ROOT / "runs" / "bench"
    argv = ["--algo", "favor+", "--env", "default", "--runs-dir", str(runs), "--name", name, "--no-progress-bar"]
    if n_timesteps:
        argv += ["--n-timesteps", str(n_timesteps)]
    t = time.perf_counter()
    run_dir = ta.main(argv)
    wall = time.perf_counter() - t
    with open(run_dir / "summary.yaml") as f:
        import yaml

        summary = yaml.safe_load(f)
    print(f"full FAVOR run: {summary['num_timesteps']} steps with {summary['n_envs']} envs in {wall:.0f} s "
          f"(wall, including env start-up and evaluations)")
    out = {"wall_seconds": round(wall, 1), "train": summary, "run_dir": str(run_dir)}
    out["vs_random"] = compare_with_random(run_dir, episodes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["speed", "full", "eval"])
    parser.add_argument("run_dir", nargs="?", help="for eval: the run folder")
    parser.add_argument("--steps", type=int, default=600, help="speed: measured steps per setting")
    parser.add_argument("--warmup", type=int, default=100, help="speed: unmeasured steps first")
    parser.add_argument("--episodes", type=int, default=20, help="full/eval: paired episodes against random")
    parser.add_argument("--n-timesteps", type=int, default=None, help="full: override configs/favor.yml")
    parser.add_argument("--name", default="favor_default_full", help="full: run name under runs/bench")
    parser.add_argument("--model", default="model.zip", help="eval: which saved model of the run")
    parser.add_argument("--mode", default="topk", choices=["topk", "one"],
                        help="eval: deployed top-K, or the 'one' training regime")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    info = {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg(), "torch": torch.__version__}
    if args.part == "speed":
        result = measure_speed(args.steps, args.warmup)
    elif args.part == "full":
        result = full_run(args.episodes, args.n_timesteps, args.name)
    else:
        if not args.run_dir:
            parser.error("eval needs RUN_DIR")
        result = compare_with_random(Path(args.run_dir), args.episodes, args.model, mode=args.mode)
    result.update(info, load_average_at_end=os.getloadavg())
    out = ROOT / "runs" / "bench" / f"train_speed_{args.part}{'_one' if args.mode == 'one' else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(result, indent=1, default=float))
    print(f"written {out}")


if __name__ == "__main__":
    main()
