"""Where an env step's time goes on a device: cProfile of a random policy's steps (issue #33). A benchmark.

The local round is one part of a step; the rest is the loss passes, the evaluation on every client's
test split, the aggregation, FAVOR's PCA projection, the observation and the bookkeeping on the host.
This prints the functions with the most cumulative and own time over ``--steps`` steps (after one
warm-up step, which captures the CUDA graphs), so that what a GPU step waits on is named.

    python bench/gpu_profile.py [--preset default] [--device cuda] [--steps 30] [--top 25]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from fedsel_env.config import make_config
from fedsel_env.env import FedSelectEnv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--reset", action="store_true", help="also profile the first reset (the federation built)")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_profile: no CUDA GPU here (torch.cuda.is_available() is False); nothing measured")
        return
    env = FedSelectEnv(config=make_config({"device": args.device}, preset=args.preset))
    env.action_space.seed(0)
    if args.reset:
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        env.reset(seed=0)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        prof.disable()
        print(f"# {args.preset} on {args.device}: first reset {time.perf_counter() - t:.2f} s (profiled)")
        _print(prof, "cumulative", args.top)
    else:
        env.reset(seed=0)
    env.step(env.action_space.sample())
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    done = 0
    for _ in range(args.steps):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        done += 1
        if term or trunc:
            break
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    prof.disable()
    spent = time.perf_counter() - t
    env.close()
    print(f"# {args.preset} on {args.device}: {done} steps, {spent / done * 1e3:.1f} ms a step (profiled)")
    for key in ("cumulative", "tottime"):
        _print(prof, key, args.top)


def _print(prof: cProfile.Profile, key: str, top: int) -> None:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(key).print_stats(top)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
    print(f"\n## by {key}")
    print("\n".join(line[:160] for line in lines[start:start + top + 1]))


if __name__ == "__main__":
    main()
