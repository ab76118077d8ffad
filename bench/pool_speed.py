"""Evaluation-pass speed of the 2x2 max-pool: PyTorch's CPU kernel against Pool2x2's strided maximum.

Prints microseconds per image for each pool layer of fedmgda_cnn and for the whole forward pass of
the CNNs, in evaluation mode (``torch.inference_mode``), one torch thread.

Usage:  python bench/pool_speed.py [--rows 2048] [--repeats 5]
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def per_row_us(fn, rows: int, repeats: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats / rows * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from fedsel_env.sim.models import Pool2x2, make_model

    print(f"torch {torch.__version__}, 1 thread, {args.rows} images per pass")
    print("| input | nn.MaxPool2d (us/image) | Pool2x2 (us/image) | speed-up |")
    print("|---|---|---|---|")
    for shape in ((10, 24, 24), (20, 8, 8), (20, 24, 24), (50, 8, 8)):
        x = torch.randn(args.rows, *shape)
        with torch.inference_mode():
            a = per_row_us(lambda: F.max_pool2d(x, 2), args.rows, args.repeats)
            b = per_row_us(lambda: Pool2x2()(x), args.rows, args.repeats)
        print(f"| {shape} | {a:.2f} | {b:.2f} | {a / b:.1f}x |")
    print("\n| model | forward with nn.MaxPool2d (us/image) | with Pool2x2 (us/image) | speed-up |")
    print("|---|---|---|---|")
    for name, shape in (("fedmgda_cnn", (1, 28, 28)), ("favor_cnn", (1, 28, 28)), ("cifar_cnn", (3, 32, 32))):
        net = make_model(name, shape, 10)
        ref = torch.nn.Sequential(*[torch.nn.MaxPool2d(2) if isinstance(m, Pool2x2) else m for m in net])
        x = torch.randn(args.rows, *shape)
        with torch.inference_mode():
            a = per_row_us(lambda: ref(x), args.rows, args.repeats)
            b = per_row_us(lambda: net(x), args.rows, args.repeats)
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")


if __name__ == "__main__":
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()
    main()
