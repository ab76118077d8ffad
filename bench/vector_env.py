"""Aggregate env steps per second: FedSelectVectorEnv against Gymnasium's SyncVectorEnv / AsyncVectorEnv (issue #27).

    python bench/vector_env.py                                   # every setting, E = 1, 8, 64, 256
    python bench/vector_env.py --presets default --sizes 64 --seconds 20
    python bench/vector_env.py --device cuda --sizes 1024 --presets default     # bench/gpu_check.sh
    python bench/vector_env.py --train --sizes 8 64 --baseline-root /tmp/base   # SB3 training steps/s
    python bench/vector_env.py --profile 10 --presets default --sizes 64          # where a vector step's time goes
    python bench/vector_env.py --eval --presets default tiny --sizes 1 16         # evaluate.py --n-envs E

Every env plays natural episodes (resets and autoresets included, as in RL training) under random actions
from a seeded action space. For each setting and E it prints the batched env's aggregate rate (E × vector
steps / s); SyncVectorEnv's and AsyncVectorEnv's aggregate rates are measured once per setting (Sync at
``--sync-envs`` sub-envs: its rate per sub-env does not grow with E, it steps them one after another; Async
with 2 worker processes, one per core here) and each row gives the ratio batched / Sync, and the 1-minute load
average when the row was measured. A benchmark, not a test: the figures go to docs/PERFORMANCE.md with the load
and the versions printed here.

``--profile STEPS`` instead runs STEPS vector steps of each setting and E under ``cProfile`` and prints the
shares of the step's time: the fused local training, the loss and evaluation passes, FAVOR's PCA projections,
the observation, ``info``, and the rest (each sub-env's own Python: action decoding, system draws, adversary,
aggregation, records, reward, and the vector env's batching).

``--eval`` instead times ``fedsel_eval.run`` (what ``evaluate.py`` does: every hand-written agent, ``--eval-seeds``
seeds, no plots) with ``n_envs`` = each E (1 = one episode after another), checks that every run wrote the
same episode records, and prints the seconds.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: setting -> (env id, config overrides)
SETTINGS: Dict[str, Dict[str, Any]] = {
    "default": {"preset": "default"},
    "default_one": {"preset": "default", "action_mode": "one"},
    "synthetic": {"preset": "synthetic"},
    "tiny": {"preset": "tiny"},
    # experiments/favor_study.py's Fashion-MNIST MLP setting (E = 1 local epoch), `one` mode as FAVOR trains
    "fmnist_mlp_one": {"dataset": "fashion_mnist", "num_clients": 100, "samples_per_client": 600,
                       "test_fraction": 1 / 12, "partition": "sigma", "partition_params": {"sigma": 0.8},
                       "model": "mlp", "model_params": {"hidden": 64}, "local_epochs": 1, "batch_size": 10,
                       "lr": 0.05, "clients_per_round": 10, "federation_seed": 0, "action_mode": "one"},
}


def _split(setting: Dict[str, Any], device: str):
    cfg = dict(setting)
    preset = cfg.pop("preset", None)
    if device != "cpu":
        cfg["device"] = device
    return preset, cfg


def rate(make, seconds: float, min_steps: int = 3) -> float:
    """Aggregate env steps per second of a vector env: E × vector steps over the time they took."""
    envs = make()
    try:
        envs.action_space.seed(0)
        envs.reset(seed=0)
        envs.step(envs.action_space.sample())  # warm-up (first compilation of kernels, caches)
        start, steps = time.perf_counter(), 0
        while steps < min_steps or time.perf_counter() - start < seconds:
            envs.step(envs.action_space.sample())
            steps += 1
        return envs.num_envs * steps / (time.perf_counter() - start)
    finally:
        envs.close()


TRAIN_RUN = """
import sys, time, tempfile
sys.path.insert(0, '.')
import importlib.util
spec = importlib.util.spec_from_file_location('train_agent', 'train_agent.py')
ta = importlib.util.module_from_spec(spec); sys.modules['train_agent'] = ta; spec.loader.exec_module(ta)
argv = sys.argv[1:] + ['--runs-dir', tempfile.mkdtemp(), '--eval-freq', '0', '--save-freq', '0',
                       '--no-progress-bar', '--verbose', '0']
t = time.perf_counter(); ta.main(argv); print('SECONDS', time.perf_counter() - t)
"""


def train_rate(root: str, algo: str, mode: str, steps: int, n_envs: int, vec_env: Optional[str]) -> float:
    """SB3 training steps (env transitions) per second of ``train_agent.py`` in checkout ``root`` (envs, model,
    learning and all; imports excluded). ``vec_env`` None: the checkout's own default (before #27: SubprocVecEnv)."""
    argv = ["--algo", algo, "--env", "default", "--env-kwargs", f"action_mode={mode}", "-n", str(steps),
            "--n-envs", str(n_envs)] + (["--vec-env", vec_env] if vec_env else [])
    if algo == "dqn":
        argv += ["--hyperparams", "learning_starts=200"]
    return steps / train_seconds(root, argv)


def train_seconds(root: str, argv: list) -> float:
    """Wall seconds of ``train_agent.py argv`` run in checkout ``root`` as a subprocess (:data:`TRAIN_RUN`: no
    evaluation, checkpoints or progress bar; imports excluded)."""
    out = subprocess.run([sys.executable, "-c", TRAIN_RUN, *argv], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"train_agent.py {' '.join(argv)} in {root} failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().split("SECONDS")[-1])


def train_table(args: argparse.Namespace) -> None:
    """DQN on the default `one` mode and PPO on `topk`: this checkout batched at each E, async at 2 envs, and
    (``--baseline-root``) the checkout before #27 with its default (2 SubprocVecEnv workers)."""
    root = str(Path(__file__).resolve().parents[1])
    print("| algorithm, mode | run | steps | training steps/s |")
    print("|---|---|---:|---:|")
    for algo, mode in (("dqn", "one"), ("ppo", "topk")):
        runs = [(f"baseline ({args.baseline_root}), 2 envs, its default", args.baseline_root, 2, None,
                 args.train_steps)] if args.baseline_root else []
        runs += [("this checkout, async, 2 envs", root, 2, "async", args.train_steps)]
        runs += [(f"this checkout, batched, {e} envs", root, e, "batched", args.train_steps * max(1, e // 4))
                 for e in args.sizes]
        for label, where, e, kind, steps in runs:
            r = train_rate(where, algo, mode, steps, e, kind)
            print(f"| {algo}, {mode} | {label} | {steps} | {r:.1f} |", flush=True)


#: --profile's parts of a vector step: (label, [(module file suffix, function name)]), cumulative times
PARTS = [
    ("fused local training of every sub-env's clients (train_requests)",
     [("fedsel_env/vector_training.py", "train_requests")]),
    ("loss passes F_k(w) before and after the round, and the evaluation of the new global model",
     [("fedsel_env/vector_training.py", "forward_requests")]),
    ("FAVOR's PCA projections (WeightPCA.project)", [("fedsel_env/server_view.py", "project")]),
    ("the observation (ServerView.observe)", [("fedsel_env/server_view.py", "observe")]),
    ("info: each sub-env's (step_info) and the vector env's batching (_add_info)",
     [("fedsel_env/episode_info.py", "step_info"), ("gymnasium/vector/vector_env.py", "_add_info")]),
]


def profile(make, steps: int) -> None:
    """Print the shares of ``steps`` vector steps' time (after a reset and a warm-up step) by :data:`PARTS`."""
    import cProfile
    import pstats

    envs = make()
    try:
        envs.action_space.seed(0)
        envs.reset(seed=0)
        envs.step(envs.action_space.sample())
        actions = [envs.action_space.sample() for _ in range(steps)]
        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.enable()
        for a in actions:
            envs.step(a)
        prof.disable()
        wall = time.perf_counter() - start
        stats = pstats.Stats(prof).stats
        total = sum(v[2] for v in stats.values())  # (calls, primitive calls, own time, cumulative, callers)
        print(f"{envs.num_envs * steps} env steps in {wall:.2f} s under the profiler "
              f"({envs.num_envs * steps / wall:.1f} steps/s, load {os.getloadavg()[0]:.1f})")
        print("| part | share |\n|---|---:|")
        rest = 1.0
        for label, funcs in PARTS:
            t = sum(ct for (file, _, name), (_, _, _, ct, _) in stats.items()
                    if any(file.endswith(f) and name == n for f, n in funcs))
            rest -= t / total
            print(f"| {label} | {100 * t / total:.0f}% |")
        print(f"| the rest: each sub-env's own Python and the vector env's | {100 * rest:.0f}% |")
        kernels = sum(v[2] for (file, _, name), v in stats.items() if file == "~" and "torch" in name)
        print(f"time inside torch's operations (all parts; kernels and their dispatch): {100 * kernels / total:.0f}%")
    finally:
        envs.close()


def eval_table(args: argparse.Namespace) -> None:
    """``evaluate.py --n-envs E`` against E = 1: seconds for the same evaluation, records checked equal."""
    import json
    import tempfile

    import fedsel_eval

    print("| setting | policies × seeds | n_envs | seconds | vs n_envs = 1 | load |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.presets:
        preset, cfg = _split(SETTINGS[name], args.device)
        env = {**cfg, "preset": preset} if preset else cfg
        base, first = None, None
        for e in args.sizes:
            with tempfile.TemporaryDirectory() as out:
                start = time.perf_counter()
                result = fedsel_eval.run(out, env=env, seeds=list(range(args.eval_seeds)), n_envs=e,
                                         progress=False, plots=False)
                seconds = time.perf_counter() - start
            records = {r["key"]: json.dumps({k: v for k, v in r.items() if k != "wall_time_s"}, sort_keys=True)
                       for r in result.records}
            first = first or records
            if records != first:
                raise AssertionError(f"{name}: n_envs = {e} wrote other records than n_envs = {args.sizes[0]}")
            base = base or seconds
            print(f"| {name} | {len(result.plan.policies)} × {args.eval_seeds} | {e} | {seconds:.1f} | "
                  f"{base / seconds:.2f}× | {os.getloadavg()[0]:.1f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 8, 64, 256])
    p.add_argument("--seconds", type=float, default=10.0, help="time per measurement (at least 3 vector steps)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--sync-envs", type=int, default=4, help="sub-envs of the SyncVectorEnv reference")
    p.add_argument("--no-reference", action="store_true", help="skip SyncVectorEnv / AsyncVectorEnv")
    p.add_argument("--train", action="store_true", help="instead: SB3 training steps/s through train_agent.py")
    p.add_argument("--train-steps", type=int, default=1000, help="--train: steps per run (x E/4 for batched)")
    p.add_argument("--baseline-root", help="--train: a checkout of the code before #27 (git archive) to compare")
    p.add_argument("--profile", type=int, metavar="STEPS", help="instead: where STEPS vector steps' time goes")
    p.add_argument("--eval", action="store_true", help="instead: fedsel_eval.run with n_envs = each E")
    p.add_argument("--eval-seeds", type=int, default=5, help="--eval: seeds 0..N-1")
    args = p.parse_args()
    if args.train:
        print(f"# load before: {os.getloadavg()}")
        train_table(args)
        print(f"# load after: {os.getloadavg()}")
        return

    import gymnasium as gym
    import torch

    import fedsel_env  # noqa: F401
    from fedsel_env.vector import FedSelectVectorEnv

    print(f"# {platform.node()}  {os.cpu_count()} CPUs  torch {torch.__version__}  gymnasium {gym.__version__}  "
          f"numpy {np.__version__}  python {platform.python_version()}  device {args.device}")
    print(f"# load before: {os.getloadavg()}")
    if args.eval:
        eval_table(args)
        print(f"# load after: {os.getloadavg()}")
        return
    if args.profile:
        for name in args.presets:
            preset, cfg = _split(SETTINGS[name], args.device)
            for e in args.sizes:
                print(f"\n{name}, E = {e}:")
                profile(lambda: FedSelectVectorEnv(e, config=cfg, preset=preset), args.profile)
        print(f"# load after: {os.getloadavg()}")
        return
    print("| setting | E | batched steps/s | Sync steps/s | Async(2) steps/s | batched / Sync | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.presets:
        preset, cfg = _split(SETTINGS[name], args.device)
        sync = asyn = float("nan")
        if not args.no_reference:
            env_id = fedsel_env.config.ENV_IDS[preset or "default"]
            sync = rate(lambda: gym.make_vec(env_id, args.sync_envs, vectorization_mode="sync", config=cfg),
                        args.seconds)
            asyn = rate(lambda: gym.make_vec(env_id, 2, vectorization_mode="async", config=cfg), args.seconds)
        for e in args.sizes:
            batched = rate(lambda: FedSelectVectorEnv(e, config=cfg, preset=preset), args.seconds)
            print(f"| {name} | {e} | {batched:.1f} | {sync:.1f} | {asyn:.1f} | {batched / sync:.1f}× | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
