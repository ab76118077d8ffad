"""One local round on a GPU: the simulator's paths against the hand-written floor (issue #33). A benchmark.

Part 1 — a digits round (K MLP clients 64-64-10, 80 samples each, batch 10, one epoch: 8 SGD steps), as
``bench/gpu_floor.py`` (the shared probe's) floor measures it, for each K:

- ``captured``: ``BatchedTrainer.train`` as it runs on CUDA by default — the plan drawn on the host,
  uploaded once, the 8 steps replayed from CUDA graphs (``fedsel_env/sim/captured.py``);
- ``eager``: the same trainer with ``captured=False`` (the fused MLP step launched from Python);
- ``vmap``: ``captured=False`` and ``fused=False`` (``torch.func.vmap(grad)``, the path before issue #27),
  where the trainer has the ``fused`` switch;
- ``plan``: the host's share of ``captured`` (drawing the K permutations, ``batch_plan``);
- ``floor``: the probe's hand-written step replayed from one CUDA graph (no plan, no gather).

Part 2 — FAVOR's Fashion-MNIST local round (``favor_cnn``, K = 10 clients × 600 samples, 5 epochs at
batch 10: 300 steps; K = 100: the reset's profiling round), with the env's deterministic settings: captured
with the CNN step through ``stacked_net`` (the CUDA default; fp32, and with TF32 matrix products), captured
through ``vmap(grad)`` (``FEDSEL_CNN_STEP=vmap``), and eager; random inputs (the speed does not depend on them).

Each figure is the median of ``--repeats`` rounds after a warm-up round (which captures the graphs).

    python bench/gpu_round.py [--ks 5 320 1280 5120] [--repeats 20]
    python bench/gpu_round.py --device cpu --ks 5 --repeats 2 --favor-repeats 1   # a smoke run (no floor, no graphs)
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fedsel_env.sim.models import init_params, make_model  # noqa: E402
from fedsel_env.sim.training import BatchedTrainer  # noqa: E402


DEVICE = torch.device("cuda")


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up (captures the graphs on the captured path)
    _sync()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        _sync()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _trainer(model_name, input_shape, k, samples, epochs, captured, fused=True):
    dev = DEVICE
    g = torch.Generator().manual_seed(0)
    n = k * samples
    x = torch.randn(n, *input_shape, generator=g).to(dev)
    y = torch.randint(0, 10, (n,), generator=g).to(dev)
    model = make_model(model_name, input_shape, 10)
    kw = dict(batch_size=10, lr=0.05, local_epochs=epochs, chunk_clients=k, captured=captured)
    if "fused" in inspect.signature(BatchedTrainer).parameters:
        kw["fused"] = fused
    elif not fused:
        return None
    tr = BatchedTrainer(model, x, y, np.arange(k + 1) * samples, **kw)
    w0 = tr.layout.flatten(init_params(model, torch.Generator().manual_seed(1))).to(dev)
    return tr, w0


def _round_time(tr_w0, k, repeats, rnd=[0]):
    if tr_w0 is None:
        return float("nan")
    tr, w0 = tr_w0
    clients = list(range(k))

    def one():
        rnd[0] += 1
        tr.train(w0, clients, [np.random.default_rng([rnd[0], c]) for c in clients])

    t = _median_time(one, repeats)
    if tr.captured is not None and tr.captured.failed:
        print(f"  !! capture failed, eager path timed instead: {tr.captured.failed}", flush=True)
    return t


def _plan_time(tr_w0, k, repeats):
    tr, _ = tr_w0
    clients = list(range(k))
    out = []
    for r in range(repeats):
        t = time.perf_counter()
        tr.batch_plan(clients, [np.random.default_rng([r, c]) for c in clients])
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 320, 1280, 5120])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--favor-repeats", type=int, default=5)
    ap.add_argument("--skip-favor", action="store_true")
    ap.add_argument("--favor-ks", type=int, nargs="+", default=[10, 100],
                    help="FAVOR rounds of K clients (10: a round; 100: the reset's profiling round)")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu for a smoke run of this script")
    args = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        print("gpu_round: no CUDA GPU here (torch.cuda.is_available() is False); nothing measured")
        return
    import gpu_floor

    name = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "CPU (smoke run: fixed-shape steps, no graphs)"
    print(f"# {name}, torch {torch.__version__}; FEDSEL_DETERMINISTIC="
          f"{os.environ.get('FEDSEL_DETERMINISTIC', '1')}; median of {args.repeats} rounds, ms")
    print("| K | captured | eager (fused) | vmap | plan (host) | floor (graph) | captured / floor |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for k in args.ks:
        cap = _trainer("mlp", (64,), k, 80, 1, captured=True)
        t_cap = _round_time(cap, k, args.repeats)
        t_plan = _plan_time(cap, k, args.repeats)
        del cap
        t_eager = _round_time(_trainer("mlp", (64,), k, 80, 1, captured=False), k, args.repeats)
        t_vmap = _round_time(_trainer("mlp", (64,), k, 80, 1, captured=False, fused=False), k,
                             max(3, args.repeats // 4))
        t_floor = gpu_floor.floor(k)[1] if DEVICE.type == "cuda" else float("nan")
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
        print(f"| {k} | {t_cap * 1e3:.3f} | {t_eager * 1e3:.3f} | {t_vmap * 1e3:.3f} | {t_plan * 1e3:.3f} | "
              f"{t_floor * 1e3:.3f} | {t_cap / t_floor:.1f}x |", flush=True)
    if args.skip_favor:
        return
    from fedsel_env.sim.device import use_deterministic

    use_deterministic(DEVICE)  # as the env does (FEDSEL_DETERMINISTIC=0 in the environment leaves torch alone)
    print(f"\n# FAVOR's local round: favor_cnn, K clients x 600 samples, 5 epochs, batch 10 (300 steps); median of "
          f"{args.favor_repeats}, s. K = 10 is a round, K = 100 the reset's profiling round. deterministic "
          f"algorithms: {torch.are_deterministic_algorithms_enabled()}")
    variants = [("captured, stacked", True, "stacked", False), ("captured, stacked, TF32", True, "stacked", True),
                ("captured, vmap", True, "vmap", False), ("eager (vmap)", False, "vmap", False)]
    for k in args.favor_ks:
        for label, captured, step, tf32 in variants:
            if k > 10 and (not captured or tf32):
                continue  # the eager profiling round is slow, and TF32's effect shows at K = 10
            os.environ["FEDSEL_CNN_STEP"] = step
            torch.backends.cuda.matmul.allow_tf32 = tf32
            tr, w0 = _trainer("favor_cnn", (1, 28, 28), k, 600, 5, captured=captured)
            clients = list(range(k))
            times = []
            for r in range(args.favor_repeats + 1):  # round 0 captures the graphs
                _sync()
                t = time.perf_counter()
                tr.train(w0, clients, [np.random.default_rng([r, c]) for c in clients])
                _sync()
                times.append(time.perf_counter() - t)
            failed = tr.captured.failed if tr.captured is not None else None
            print(f"favor_cnn local round K={k:<3d} {label:24s} {statistics.median(times[1:]):.4f} s  "
                  f"(first round: {times[0]:.2f} s)" + (f"  !! capture failed: {failed}" if failed else ""), flush=True)
            del tr, w0
            if DEVICE.type == "cuda":
                torch.cuda.empty_cache()
    os.environ.pop("FEDSEL_CNN_STEP", None)
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()
