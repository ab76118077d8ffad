"""How fast is a round? The env's training throughput against one plain model, and scaling in N.

Part 1 (issue #2's goal: env rate >= 1.0x the single-model rate): client-sample updates per
second of ``env.step`` (N = 100, K = 10, 600 Fashion-MNIST samples per client, one local epoch at
batch 10: 6,000 sample-updates per round, plus evaluation on every client's test split, PCA and
bookkeeping) against the raw rate of one ``nn.Module`` of the same architecture trained with
``torch.optim.SGD`` on the same data at the same batch size, measured in the same run.

Part 2: step time and peak resident memory for N = 100, 1,000, 10,000 clients at K = 10 on
Synthetic(1, 1) with logistic regression, each N in its own process (sizes capped, see --max-samples).

The env runs with ``workers: 1`` and ``workers: 2`` (a round's clients and evaluation split over two
processes of one torch thread each); the single model runs with 1 and with 2 torch threads, and the
ratio is taken against the faster of the two.

Usage:  python bench/round_speed.py [--rounds 10] [--skip-scaling] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def env_rate(model: str, rounds: int, dataset: str, workers: int = 1) -> tuple[float, float]:
    from fedsel_env.env import FedSelectEnv

    cfg = dict(dataset=dataset, num_clients=100, samples_per_client=600, test_fraction=1 / 6,
               partition="iid", partition_params={}, model=model, local_epochs=1, batch_size=10, lr=0.01,
               clients_per_round=10, max_rounds=rounds + 5, target_accuracy=0.999,
               system={"availability": 1.0}, workers=workers)
    env = FedSelectEnv(config=cfg)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    env.step(rng.standard_normal(100).astype(np.float32))  # warm-up
    t = time.perf_counter()
    for _ in range(rounds):
        env.step(rng.standard_normal(100).astype(np.float32))
    dt = (time.perf_counter() - t) / rounds
    env.close()
    return 10 * 600 / dt, dt


def single_model_rate(model: str, steps: int, dataset: str) -> float:
    from fedsel_env.config import make_config
    from fedsel_env.sim.data import build_federated_data
    from fedsel_env.sim.models import make_model

    cfg = make_config(dict(dataset=dataset, num_clients=100, samples_per_client=600, test_fraction=1 / 6,
                           partition="iid", partition_params={}))
    data = build_federated_data(cfg, np.random.default_rng(0))
    net = make_model(model, data.input_shape, data.num_classes)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = data.x_train[:6000], data.y_train[:6000]
    perm = torch.randperm(6000, generator=torch.Generator().manual_seed(0))
    def run(n):
        for s in range(n):
            idx = perm[(s * 10) % 6000:(s * 10) % 6000 + 10]
            opt.zero_grad()
            F.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    run(50)
    t = time.perf_counter()
    run(steps)
    return steps * 10 / (time.perf_counter() - t)


def scaling_child(n: int, rounds: int, max_samples: int) -> None:
    from fedsel_env.env import FedSelectEnv

    cfg = dict(dataset="synthetic", dataset_params={"alpha": 1.0, "beta": 1.0, "max_samples": max_samples},
               num_clients=n, partition="natural", partition_params={}, model="logreg", batch_size=10,
               lr=0.05, local_epochs=1, clients_per_round=10, max_rounds=rounds + 5, target_accuracy=0.999)
    env = FedSelectEnv(config=cfg)
    t0 = time.perf_counter()
    env.reset(seed=0)
    reset_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    env.step(rng.standard_normal(n).astype(np.float32))
    t = time.perf_counter()
    for _ in range(rounds):
        env.step(rng.standard_normal(n).astype(np.float32))
    step_s = (time.perf_counter() - t) / rounds
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"n": n, "reset_s": reset_s, "step_s": step_s, "peak_rss_gib": rss_gib}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dataset", default="fashion_mnist")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--max-samples", type=int, default=200, help="cap on Synthetic's lognormal sizes")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        scaling_child(args.child, args.rounds, args.max_samples)
        return
    print(f"torch {torch.__version__}, {args.threads} torch thread(s) per process, load "
          f"{os.getloadavg()[0]:.1f}")
    print("| model | env step, 1 process (s) | env step, 2 processes (s) | env sample-updates/s (2 proc.) "
          "| single model, 1 thread | single model, 2 threads | env (2 proc.) / best single model |")
    print("|---|---|---|---|---|---|---|")
    for model in ("fedmgda_cnn", "mlp"):
        _, dt1 = env_rate(model, args.rounds, args.dataset, workers=1)
        rate2, dt2 = env_rate(model, args.rounds, args.dataset, workers=2)
        single1 = single_model_rate(model, 600, args.dataset)
        torch.set_num_threads(2)
        single2 = single_model_rate(model, 600, args.dataset)
        torch.set_num_threads(args.threads)
        best = max(single1, single2)
        print(f"| {model} | {dt1:.3f} | {dt2:.3f} | {rate2:,.0f} | {single1:,.0f} | {single2:,.0f} | "
              f"{rate2 / best:.2f}x |", flush=True)
    if args.skip_scaling:
        return
    print("\n| N | reset (s) | step (s) | step / step(N=100) | peak RSS (GiB) |")
    print("|---|---|---|---|---|")
    base = None
    for n in (100, 1000, 10000):
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--rounds", str(args.rounds),
                              "--threads", str(args.threads), "--max-samples", str(args.max_samples)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        base = base or r["step_s"]
        print(f"| {n:,} | {r['reset_s']:.2f} | {r['step_s']:.4f} | {r['step_s'] / base:.2f}x | "
              f"{r['peak_rss_gib']:.2f} |", flush=True)


if __name__ == "__main__":
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()  # set FEDSEL_NO_TCMALLOC=1 to measure with glibc's malloc
    main()
