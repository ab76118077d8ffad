"""Env steps per second with the env's default `torch_threads: 1` against torch's own thread count.

    python bench/env_threads.py                      # tiny and default presets, 8 s each
    python bench/env_threads.py --presets tiny --seconds 20

Run it as the user would: with other work on the machine or not (the figures in docs/ENVIRONMENT.md
say which). `torch_threads: null` leaves torch's setting (its default: one thread per core).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def steps_per_second(preset: str, threads, seconds: float) -> float:
    from fedsel_env.env import FedSelectEnv

    env = FedSelectEnv(preset=preset, config={"max_rounds": 10**6, "target_accuracy": 1.0,
                                             "torch_threads": threads})
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        env.step(rng.random(env.num_clients).astype(np.float32))
        steps += 1
    return steps / (time.perf_counter() - start)


def main() -> None:
    import os

    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=["tiny", "default"])
    p.add_argument("--seconds", type=float, default=8.0)
    args = p.parse_args()
    print(f"torch {torch.__version__}, torch's own threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| preset | torch_threads: null (torch's own) | torch_threads: 1 (default) |\n|---|---:|---:|")
    for preset in args.presets:
        own, one = (steps_per_second(preset, t, args.seconds) for t in (None, 1))
        print(f"| {preset} | {own:.1f} steps/s | {one:.1f} steps/s |")


if __name__ == "__main__":
    main()
