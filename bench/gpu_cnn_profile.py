"""Where a CNN's local SGD step spends GPU time: the stacked step against vmap(grad) (issue #33). A benchmark.

One step of FAVOR's round (``favor_cnn``, K = 10 clients × a batch of 10, momentum as configured) in the
captured round's fixed-shape form, run eagerly under ``torch.profiler`` with CUDA activity; prints each
variant's CUDA kernels by total device time (the graph replays the same kernels without the launches), the
sum of kernel time per step, and the number of kernels per step.

    python bench/gpu_cnn_profile.py [--k 10] [--steps 20] [--top 12]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fedsel_env.sim.captured import CapturedTrainer  # noqa: E402
from fedsel_env.sim.device import use_deterministic  # noqa: E402
from fedsel_env.sim.models import init_params, make_model  # noqa: E402
from fedsel_env.sim.training import BatchedTrainer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--model", default="favor_cnn")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_cnn_profile: no CUDA GPU here; nothing measured")
        return
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    use_deterministic(dev)
    g = torch.Generator().manual_seed(0)
    k, samples = args.k, 600
    x = torch.randn(k * samples, 1, 28, 28, generator=g).to(dev)
    y = torch.randint(0, 10, (k * samples,), generator=g).to(dev)
    model = make_model(args.model, (1, 28, 28), 10)
    for step in ("stacked", "vmap"):
        os.environ["FEDSEL_CNN_STEP"] = step
        tr = BatchedTrainer(model, x, y, np.arange(k + 1) * samples, 10, 0.01, local_epochs=5, chunk_clients=k,
                            captured=False)
        cap = CapturedTrainer(tr, capture=False)
        w0 = tr.layout.flatten(init_params(model, torch.Generator().manual_seed(1))).to(dev)
        idx, mask = tr.batch_plan(list(range(k)), [np.random.default_rng([0, c]) for c in range(k)])
        idx, mask = idx[:args.steps], mask[:args.steps]
        cap.train_chunk(w0, idx, mask, 0.0)  # warm-up
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            cap.train_chunk(w0, idx, mask, 0.0)
            torch.cuda.synchronize()
        t_of = lambda e: getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)  # noqa: E731
        events = [e for e in prof.key_averages() if t_of(e) > 0]  # kernels, copies and sets (CUDA activity only)
        total = sum(t_of(e) for e in events)
        launches = sum(e.count for e in events)
        print(f"\n## {args.model}, K = {k}, step = {step}: {total / args.steps / 1e3:.3f} ms of kernels a step, "
              f"{launches / args.steps:.0f} kernels a step")
        print("| kernel | calls a step | us a step |")
        print("|---|---:|---:|")
        for e in sorted(events, key=lambda e: -t_of(e))[:args.top]:
            print(f"| {e.key[:90]} | {e.count / args.steps:.1f} | {t_of(e) / args.steps:.1f} |")
        del tr, cap
    os.environ.pop("FEDSEL_CNN_STEP", None)


if __name__ == "__main__":
    main()
