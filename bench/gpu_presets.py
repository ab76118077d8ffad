"""Env steps per second of every preset on a GPU against one core of its host (issue #33). A benchmark.

For each preset (and action mode), a random policy (the action space's own sampler, seeded) plays the env
on each of

- ``cuda``: ``device: cuda``, the local rounds replayed from CUDA graphs (the default there);
- ``cuda-eager``: the same with ``FEDSEL_CUDA_GRAPHS=0`` (every kernel launched from Python);
- ``cuda-vmap``: ``cuda`` with a CNN's captured step through ``vmap(grad)`` (``FEDSEL_CNN_STEP=vmap``) instead of
  ``stacked_net`` (CNN presets only);
- ``cpu-1``: ``device: cpu`` with one torch thread (``torch_threads: 1``, the env's default): one host core;

and the first ``reset`` (the federation built: data upload, w_0, the profiling round, the PCA, the graphs
captured), a second ``reset`` (a new episode) and the steps per second of up to ``--budget`` seconds of
steps (an episode's end resets, outside the timing) are printed as one Markdown table.

    python bench/gpu_presets.py [--budget 3] [--presets tiny default default:one synthetic hetero favor_fmnist]

Without a GPU it measures ``cpu-1`` only and says so. FAVOR's preset on one core takes minutes a reset
(a 100-client profiling round of a 431,080-parameter CNN), so ``cpu-1`` skips it unless ``--cpu-favor``.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import torch

from fedsel_env.config import make_config
from fedsel_env.env import FedSelectEnv

PRESETS = ["tiny", "default", "default:one", "synthetic", "hetero", "favor_fmnist"]
#: the environment variable (and value) each GPU variant sets
ENV_OF = {"cuda-eager": ("FEDSEL_CUDA_GRAPHS", "0"), "cuda-vmap": ("FEDSEL_CNN_STEP", "vmap")}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(preset: str, device: str, budget: float, max_steps: int = 500) -> dict:
    """First reset, second reset (s) and steps per second of a random policy on one preset and device."""
    name, _, mode = preset.partition(":")
    overrides = {"device": "cpu" if device == "cpu-1" else "cuda", "torch_threads": 1}
    if mode:
        overrides["action_mode"] = mode
    var, value = ENV_OF.get(device, (None, None))
    before = os.environ.get(var) if var else None
    if var:
        os.environ[var] = value
    try:
        env = FedSelectEnv(config=make_config(overrides, preset=name))
        env.action_space.seed(0)
        try:
            t = time.perf_counter()
            env.reset(seed=0)
            _sync()
            first = time.perf_counter() - t
            t = time.perf_counter()
            env.reset(seed=1)
            _sync()
            second = time.perf_counter() - t
            steps, spent, seed = 0, 0.0, 2
            while spent < budget and steps < max_steps:
                action = env.action_space.sample()
                t = time.perf_counter()
                _, _, term, trunc, _ = env.step(action)
                _sync()
                spent += time.perf_counter() - t
                steps += 1
                if term or trunc:
                    env.reset(seed=seed)
                    seed += 1
            trainer = env.federation.trainer
            cap = getattr(trainer, "captured", None)
            failed = cap.failed if cap is not None else None
        finally:
            env.close()
    finally:
        if var:
            if before is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = before
    return {"first_reset": first, "reset": second, "steps": steps, "rate": steps / spent, "step_s": spent / steps,
            "capture_failed": failed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=PRESETS, help="preset[:action_mode]")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of steps per preset and device")
    ap.add_argument("--devices", nargs="+", default=["cuda", "cuda-eager", "cpu-1"])
    ap.add_argument("--cpu-favor", action="store_true", help="also favor_fmnist on one core (minutes)")
    args = ap.parse_args()
    devices = [d for d in args.devices if d == "cpu-1" or torch.cuda.is_available()]
    if len(devices) < len(args.devices):
        print("gpu_presets: no CUDA GPU here (torch.cuda.is_available() is False): cpu-1 only")
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"# {gpu}; torch {torch.__version__}; host {os.cpu_count()} CPUs; random policy; {args.budget:g} s of "
          f"steps each (at most 500); FEDSEL_DETERMINISTIC={os.environ.get('FEDSEL_DETERMINISTIC', '1')}")
    print("| preset | device | first reset (s) | reset (s) | step (ms) | steps/s |")
    print("|---|---|---:|---:|---:|---:|")
    rates = {}
    for preset in args.presets:
        for device in devices:
            if device == "cuda-vmap" and not make_config({}, preset=preset.partition(":")[0])["model"].endswith("cnn"):
                continue  # no CNN: the same path as cuda
            if device == "cpu-1" and preset.startswith("favor_fmnist") and not args.cpu_favor:
                print(f"| {preset} | {device} | not measured (--cpu-favor) | | | |", flush=True)
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # deterministic-algorithm notices
                    r = measure(preset, device, args.budget)
            except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
                print(f"| {preset} | {device} | failed: {type(e).__name__}: {str(e)[:200]} | | | |", flush=True)
                continue
            rates[preset, device] = r["rate"]
            note = (f" (capture failed: {r['capture_failed'].splitlines()[0][:120]})" if r["capture_failed"]
                    else "")
            print(f"| {preset} | {device} | {r['first_reset']:.2f} | {r['reset']:.2f} | {r['step_s'] * 1e3:.1f} | "
                  f"{r['rate']:.1f}{note} |", flush=True)
    for preset in args.presets:
        if (preset, "cuda") in rates and (preset, "cpu-1") in rates:
            ratio = rates[preset, "cuda"] / rates[preset, "cpu-1"]
            print(f"{preset}: cuda / cpu-1 = {ratio:.2f}x ({'GPU faster' if ratio >= 1 else 'ONE CORE FASTER'})")


if __name__ == "__main__":
    main()
