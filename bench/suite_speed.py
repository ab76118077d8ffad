"""The bench suite's episodes with the reset cache off and on (issue #43): seconds to play every hand-written
agent on a scenario's reporting seeds, as ``evaluate.py --suite bench`` plays them (``fedsel_eval.bench.run_scenario``:
seed by seed, every policy on a seed one after another, so each seed's federation is built once with the cache).

    python bench/suite_speed.py --scenarios NoisyLabels PowerOfChoice --seeds 3
    python bench/suite_speed.py --scenarios PowerOfChoice --seeds 3 --n-envs 8   # through the vector env

One process, one torch thread; the two settings take turns ``--repeats`` times (off first), each into a fresh
folder (nothing reused). Prints seconds per setting, the ratio, the load average, and whether the two settings'
rows are equal but for their wall times (they must be: the cache restores a reset bit for bit). A benchmark, not a
test: figures go to docs/PERFORMANCE.md with the command and the load.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def play(name: str, seeds: int, n_envs: int, cache_bytes: int) -> tuple:
    from fedsel_env import reset_cache
    from fedsel_env.bench import REPORTING_SEEDS, scenario
    from fedsel_eval.bench import heuristic_policies, run_scenario

    reset_cache.DEFAULT_MAX_BYTES = cache_bytes  # read by every env made from here on
    sc = scenario(name)
    policies = heuristic_policies()
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        run = run_scenario(Path(d), sc, policies, REPORTING_SEEDS[:seeds], n_envs=n_envs)
        seconds = time.perf_counter() - t
    rows = sorted((r["policy"], r["seed"], r["value"], r["rounds"], r["sim_time"], r["final_accuracy"],
                   r["acc_worst10"]) for r in run.rows)
    return seconds, rows, len(policies)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", nargs="+", default=["NoisyLabels", "PowerOfChoice"])
    p.add_argument("--seeds", type=int, default=3, help="the first this many reporting seeds")
    p.add_argument("--n-envs", type=int, default=1, help="sub-envs of the vector env (1: one env, as the suite's default)")
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    if args.seeds < 1 or args.repeats < 1 or args.n_envs < 1:
        p.error("--seeds, --repeats and --n-envs must be at least 1")
    import torch

    from fedsel_env import reset_cache

    torch.set_num_threads(1)
    on_bytes = reset_cache.DEFAULT_MAX_BYTES
    print("| scenario | policies × seeds | cache off (s) | cache on (s) | off / on | same rows | load |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for name in args.scenarios:
        times = {"off": [], "on": []}
        rows = {}
        for _ in range(args.repeats):
            for setting, size in (("off", 0), ("on", on_bytes)):
                seconds, rows[setting], n_pol = play(name, args.seeds, args.n_envs, size)
                times[setting].append(seconds)
        off, on = sum(times["off"]) / args.repeats, sum(times["on"]) / args.repeats
        print(f"| {name} | {n_pol} × {args.seeds} | {off:.1f} | {on:.1f} | {off / on:.2f}× | "
              f"{'yes' if rows['off'] == rows['on'] else 'NO'} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
