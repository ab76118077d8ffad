"""FedSelect-Bench at RL scale (issue #43): each bench scenario's env rounds/s, single and batched, and its reset.

    python bench/bench_scale.py                                        # every scenario, E = 1 (single), 16, 64
    python bench/bench_scale.py --scenarios Stragglers Churn --sizes 16 --seconds 5
    python bench/bench_scale.py --device cuda --sizes 1024 --no-single --scenarios NoisyLabels   # bench/gpu_check.sh
    python bench/bench_scale.py --train --device cuda --scenarios Stragglers --n-envs 1024    # train_agent.py steps/s

What RL training does: every env is a scenario's ``fedsel/Bench-<Name>-v0`` config with the objective as the reward,
``federation_seed: null`` (a new federation every episode) and random ``topk`` scores from a seeded action space;
episodes end and reset as in training (the vector env's autoreset). For each scenario it prints

- ``single``: one ``FedSelectEnv``'s rounds per second (resets included, as training pays them);
- ``batched E``: one ``FedSelectVectorEnv`` of E sub-envs, E × vector steps per second;
- ``reset``: the mean seconds of a single env's ``reset(seed)`` to a fresh federation (3 seeds, after a first one).

``--train`` instead times ``train_agent.py --algo {pl_ppo, pc_dqn}`` (the Plackett-Luce PPO and the per-client Double
DQN; the run's envs, model and learning; imports excluded) on the scenario at ``--n-envs`` batched sub-envs on
``--device``: training steps (env transitions) per second. A benchmark, not a test: figures go to
docs/PERFORMANCE.md with the load and versions printed here. Build time of the vector env (its E resets) is
printed apart from the rate.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def scenario_config(name: str, device: str) -> Dict[str, Any]:
    """The env config RL training uses on scenario ``name``: its config, the objective reward, a new federation
    every episode, on ``device``."""
    from fedsel_env.bench import scenario

    sc = scenario(name)
    cfg = {**sc.env_config(), **sc.reward_config(), "federation_seed": None}
    if device != "cpu":
        cfg["device"] = device
    return cfg


def single_rate(cfg: Dict[str, Any], seconds: float) -> tuple:
    """(rounds/s of one env under random scores, resets included; mean fresh-federation reset seconds; rounds/s
    of its steps alone, the episodes' resets timed apart; mean rounds of the episodes that ended (nan: none did))."""
    from fedsel_env.env import FedSelectEnv

    env = FedSelectEnv(config=cfg)
    try:
        env.action_space.seed(0)
        env.reset(seed=0)
        resets = []
        for s in (1, 2, 3):
            t = time.perf_counter()
            env.reset(seed=s)
            resets.append(time.perf_counter() - t)
        start, rounds, seed, in_resets = time.perf_counter(), 0, 10, 0.0
        lengths, current = [], 0  # rounds of each episode that ended; of the one under way
        while rounds < 3 or time.perf_counter() - start < seconds:
            _obs, _r, term, trunc, _info = env.step(env.action_space.sample())
            rounds, current = rounds + 1, current + 1
            if term or trunc:
                seed, lengths, current = seed + 1, lengths + [current], 0
                t = time.perf_counter()
                env.reset(seed=seed)
                in_resets += time.perf_counter() - t
        wall = time.perf_counter() - start
        return rounds / wall, float(np.mean(resets)), rounds / (wall - in_resets), \
            float(np.mean(lengths)) if lengths else float("nan")
    finally:
        env.close()


def batched_rate(cfg: Dict[str, Any], e: int, seconds: float) -> tuple:
    """(aggregate rounds/s of a FedSelectVectorEnv of ``e`` sub-envs, resets included; seconds to build it and
    reset it once; aggregate rounds/s of its steps alone; mean rounds of the episodes that ended (nan: none did; a
    window shorter than an episode holds few resets, and its figure with resets is then mostly steps)).

    Autoreset is off (``disabled``): every vector step is a round of every sub-env, and the sub-envs whose
    episodes ended are reset after it (``options={"reset_mask": ...}``, all of them together, as the
    ``next_step`` mode resets them in the next step), timed apart from the steps."""
    from fedsel_env.vector import FedSelectVectorEnv

    t = time.perf_counter()
    envs = FedSelectVectorEnv(e, config=cfg, autoreset_mode="disabled")
    try:
        envs.action_space.seed(0)
        envs.reset(seed=0)
        build = time.perf_counter() - t

        current = np.zeros(e, dtype=np.int64)  # rounds of each sub-env's episode under way
        lengths: List[int] = []                 # rounds of each episode that ended

        def play() -> float:  # one vector step, then the resets it calls for: their seconds
            _obs, _r, term, trunc, _info = envs.step(envs.action_space.sample())
            current[:] += 1
            ended = term | trunc
            if not ended.any():
                return 0.0
            lengths.extend(current[ended].tolist())
            current[ended] = 0
            t0 = time.perf_counter()
            envs.reset(options={"reset_mask": ended})
            return time.perf_counter() - t0

        play()  # warm-up
        lengths.clear()
        start, steps, in_resets = time.perf_counter(), 0, 0.0
        while steps < 3 or time.perf_counter() - start < seconds:
            in_resets += play()
            steps += 1
        wall = time.perf_counter() - start
        return e * steps / wall, build, e * steps / (wall - in_resets), \
            float(np.mean(lengths)) if lengths else float("nan")
    finally:
        envs.close()


def train_rate(algo: str, env_id: str, steps: int, n_envs: int, device: str, extra: List[str]) -> float:
    """Training steps per second of ``train_agent.py --algo algo`` (a subprocess; the whole run's wall time)."""
    argv = ["--algo", algo, "--env", env_id, "-n", str(steps), "--n-envs", str(n_envs), "--vec-env", "batched",
            "--device", device, *extra]
    from bench.vector_env import train_seconds  # train_agent.py in a subprocess, timed (one runner for both)

    return steps / train_seconds(str(ROOT), argv)


def main() -> None:
    from fedsel_env.bench import SCENARIOS

    names = [str(s) for s in SCENARIOS]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", nargs="+", default=names, choices=names)
    p.add_argument("--sizes", nargs="+", type=int, default=[16, 64], help="batched vector env sizes E")
    p.add_argument("--seconds", type=float, default=8.0, help="time per measurement (at least 3 steps)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-single", action="store_true", help="skip the single env and its reset")
    p.add_argument("--train", action="store_true", help="instead: train_agent.py training steps/s")
    p.add_argument("--n-envs", type=int, default=64, help="--train: batched sub-envs")
    p.add_argument("--train-steps", type=int, default=0, help="--train: steps per run (0: 2 PPO rollouts)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(1)
    import gymnasium as gym

    print(f"# {platform.node()}  {os.cpu_count()} CPUs  torch {torch.__version__}  gymnasium {gym.__version__}  "
          f"python {platform.python_version()}  device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else ""))
    print(f"# load before: {os.getloadavg()}")
    if args.train:
        from fedsel_env.bench import scenario

        print("| scenario | algorithm | n_envs | steps | training steps/s | load |\n|---|---|---:|---:|---:|---:|")
        for name in args.scenarios:
            env_id = scenario(name).env_id
            # pl_ppo: n_steps 32 a sub-env per rollout (configs/pl_ppo.yml), two rollouts; pc_dqn: K steps a round
            for algo, steps in (("pl_ppo", args.train_steps or 2 * 32 * args.n_envs),
                                ("pc_dqn", args.train_steps or 16 * args.n_envs)):
                extra = ["--hyperparams", "learning_starts=256"] if algo == "pc_dqn" else []
                r = train_rate(algo, env_id, steps, args.n_envs, args.device, extra)
                print(f"| {name} | {algo} | {args.n_envs} | {steps} | {r:.1f} | {os.getloadavg()[0]:.1f} |",
                      flush=True)
        print(f"# load after: {os.getloadavg()}")
        return
    cols = ([] if args.no_single else ["single rounds/s"]) + [f"batched E={e} rounds/s" for e in args.sizes]
    cols += [] if args.no_single else ["reset s"]
    print("| scenario | " + " | ".join(cols) + " | build s (per E) | load |")
    print("|---|" + "---:|" * (len(cols) + 2))
    for name in args.scenarios:
        cfg = scenario_config(name, args.device)
        cells, builds = [], []
        if not args.no_single:
            single, reset = single_rate(cfg, args.seconds)[:2]
            cells.append(f"{single:.1f}")
        for e in args.sizes:
            r, build = batched_rate(cfg, e, args.seconds)[:2]
            cells.append(f"{r:.1f}")
            builds.append(f"{build:.1f}")
        if not args.no_single:
            cells.append(f"{reset:.2f}")
        print(f"| {name} | " + " | ".join(cells) + f" | {', '.join(builds)} | {os.getloadavg()[0]:.1f} |",
              flush=True)
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
