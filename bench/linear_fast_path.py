"""Local SGD of logistic regression: the closed-form path against ``vmap(grad)``, per round of q-FedAvg.

The run is one of ``experiments/qffl_synthetic.py``'s q-FedAvg runs at the paper's scale (its ``PAPER``
config: Synthetic(1, 1), 100 devices with sizes as generated — up to ~4,400 samples, i.e. up to ~445
minibatch steps a round — K = 10 sampled ∝ n_k, B = 10, E = 1, η = 0.1), played in one env per path
from the same seed:

- ``analytic``: the trainer's default for a single-``nn.Linear`` model on the CPU
  (``fedsel_env/sim/linear_sgd.py``): the gradient written out, clients that have finished their
  epoch dropped from the batch;
- ``analytic_keep``: the same without dropping finished clients (masked as the vmapped path masks them);
- ``vmap``: ``BatchedTrainer``'s ``vmap(grad(functional_call))``, the path every other model takes.

The paths' rounds are interleaved in blocks (``--block`` rounds of one, then of the next, ...), so that
load from other processes on the machine falls on all of them alike. All paths play the same rounds
and, the closed form being bit-for-bit the autograd result, must end at the same global model: the
script checks that and says so. Reported: seconds per round (mean over all rounds, and the median of
the blocks' means), the reset (FAVOR's profiling round: every device trains one epoch) and the
speed-up against ``vmap``.

Usage:  OMP_NUM_THREADS=1 python bench/linear_fast_path.py [--rounds 200] [--block 10] [--paths analytic vmap]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import time
from typing import Dict, Iterator, List

import numpy as np
import torch

PATHS = ("analytic", "analytic_keep", "vmap")
#: experiments/qffl_synthetic.py's PAPER config, written out (bench/ does not import experiments/;
#: tests/test_architecture.py checks the two stay the same)
QFFL_PAPER = {"preset": "synthetic", "dataset_params": {"alpha": 1.0, "beta": 1.0, "max_samples": None},
              "local_epochs": 1, "lr": 0.1, "system": {"availability": 1.0}, "target_accuracy": 1.0,
              "eval_every": 100, "track_improvement": False}


@contextlib.contextmanager
def path(name: str) -> Iterator[None]:
    """Make the trainer take ``name``'s path while the block runs (the trainer reads both names at call time)."""
    from fedsel_env.sim import linear_sgd, training

    saved = training.linear_layer, training.train_linear
    if name == "vmap":  # the trainer then sees no single-Linear model: vmap(grad) as for any other model
        training.linear_layer = lambda model, x: None
    elif name == "analytic_keep":
        training.train_linear = functools.partial(linear_sgd.train_linear, drop_finished=False)
    try:
        yield
    finally:
        training.linear_layer, training.train_linear = saved


def main(argv: List[str] = None) -> Dict[str, Dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=200, help="timed rounds per path (default 200)")
    p.add_argument("--block", type=int, default=10, help="rounds per block before switching path (default 10)")
    p.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS, help="the paths to time (default all)")
    p.add_argument("--q", type=float, default=1.0, help="q-FedAvg's q (local training does not depend on it)")
    p.add_argument("--seed", type=int, default=0, help="the episode seed (default 0)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.block < 1:
        raise SystemExit("linear_fast_path.py: error: --rounds and --block must be >= 1")
    from fedsel_eval import chunked

    torch.set_num_threads(1)
    env_cfg = {**QFFL_PAPER, "max_rounds": args.rounds + 2, "aggregator": "qfedavg", "aggregator_params": {"q": args.q}}
    spec = chunked.RunSpec(f"qfedavg q={args.q:g} seed={args.seed}", env_cfg, "random_nk", args.seed)
    load0 = os.getloadavg()
    print(f"q-FedAvg (q = {args.q:g}) on qffl_synthetic.py's PAPER config, seed {args.seed}: {args.rounds} rounds per "
          f"path in blocks of {args.block}, one torch thread (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}); "
          f"load average at start {load0[0]:.2f}", flush=True)
    runs, reset_s = {}, {}
    for name in args.paths:
        with path(name):
            t = time.perf_counter()
            env, policy, obs, _ = chunked.start(spec)
            reset_s[name] = time.perf_counter() - t
            obs, *_ = env.step(policy.predict(obs, deterministic=True)[0])  # one untimed round: first-call set-up
        runs[name] = {"env": env, "policy": policy, "obs": obs, "seconds": [], "blocks": []}
        print(f"  {name}: env built and reset (profiling round: every device) in {reset_s[name]:.2f} s", flush=True)
    sizes = runs[args.paths[0]]["env"].federation.num_samples
    print(f"  device sizes: {int(sizes.min())}..{int(sizes.max())} samples (max {-(-int(sizes.max()) // 10)} "
          f"steps a round at B = 10)", flush=True)
    done = 0
    while done < args.rounds:
        n = min(args.block, args.rounds - done)
        for name in args.paths:
            r = runs[name]
            with path(name):
                block = []
                for _ in range(n):
                    action, _ = r["policy"].predict(r["obs"], deterministic=True)
                    t = time.perf_counter()
                    r["obs"], *_ = r["env"].step(action)
                    block.append(time.perf_counter() - t)
            r["seconds"] += block
            r["blocks"].append(float(np.mean(block)))
        done += n
        print(f"  rounds {done:4d}: " + ", ".join(f"{name} {runs[name]['blocks'][-1]:.4f} s" for name in args.paths),
              flush=True)
    load1 = os.getloadavg()
    finals = [runs[name]["env"].federation.global_params for name in args.paths]
    identical = all(torch.equal(finals[0], f) for f in finals[1:])
    out: Dict[str, Dict[str, float]] = {}
    ref = "vmap" if "vmap" in args.paths else None
    print(f"\nload average at end {load1[0]:.2f}; every path ended at the same global model bit for bit: {identical}")
    print("| path | s / round (mean) | s / round (median block) | reset (s) | speed-up vs vmap (mean) |")
    print("|---|---|---|---|---|")
    for name in args.paths:
        r = runs[name]
        mean, med = float(np.mean(r["seconds"])), float(np.median(r["blocks"]))
        out[name] = {"mean": mean, "median_block": med, "reset": reset_s[name]}
        speed = f"{np.mean(runs[ref]['seconds']) / mean:.1f}×" if ref else "—"
        print(f"| `{name}` | {mean:.4f} | {med:.4f} | {reset_s[name]:.2f} | {speed} |")
    for name in args.paths:
        runs[name]["env"].close()
    if not identical:
        raise SystemExit("linear_fast_path.py: the paths ended at different global models (expected bit-for-bit equal)")
    return out


if __name__ == "__main__":
    main()
