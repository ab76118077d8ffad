"""A fresh federation's reset (issue #43): seconds per ``env.reset(seed)`` of each bench scenario, on one or more
checkouts, measured in one run.

    python bench/reset_speed.py --scenarios QuantitySkew PowerOfChoice Large FMNISTControl
    python bench/reset_speed.py --trees /tmp/before .          # before / after: each tree's code, interleaved
    python bench/reset_speed.py --scenarios FMNISTControl --profile 25   # where the reset's time goes (cProfile)
    python bench/reset_speed.py --variant pca_fit=gram   # each tree also with these config fields, interleaved
    python bench/reset_speed.py --floor                  # and each scenario's reset floor beside it

The env is what RL training builds (``bench/bench_scale.py``'s ``scenario_config``): the scenario's config, the
objective as the reward, ``federation_seed: null`` — so every reset partitions a new federation, draws w_0, runs
the profiling round (every client trains one epoch) and fits FAVOR's PCA. Each (scenario, tree) runs in its own
process on one torch thread: one reset first (imports, file reads, caches), then ``--resets`` timed resets of
other seeds; the trees take turns ``--repeats`` times, so load that comes and goes falls on all of them. Prints
the mean and the fastest reset per (scenario, tree) and the load average beside each. A benchmark, not a test:
figures go to docs/PERFORMANCE.md with the command and the load.

``--floor`` adds, per scenario, what a fresh reset's arithmetic costs with no env logic
(``bench/bench_floor.py``'s ``reset_floor``: the profiling round's kernels — every client's loss pass, local epoch,
FedAvg, the evaluation and projections — and the cheaper PCA fit), measured in this process just after the
scenario's resets, its GFLOP, and floor / fastest reset per run (1: at the floor; below 0.5: more than 2× from it).
Where the floor itself exceeds 0.5 s, issue #43's "fresh reset ≤ 0.5 s" lies beyond this CPU's arithmetic.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import cProfile, json, pstats, sys, time
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
from fedsel_env.bench import scenario
from fedsel_env.env import FedSelectEnv
name, resets, top, extra = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
sc = scenario(name)
env = FedSelectEnv(config={**sc.env_config(), **sc.reward_config(), "federation_seed": None, **extra})
env.reset(seed=0)
prof = cProfile.Profile() if top else None
times = []
for seed in range(1, resets + 1):
    if prof: prof.enable()
    t = time.perf_counter()
    env.reset(seed=seed)
    times.append(time.perf_counter() - t)
    if prof: prof.disable()
env.close()
if prof:
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(top)
print(json.dumps(times))
"""


def reset_times(tree: Path, name: str, resets: int, profile: int, extra: Optional[dict] = None) -> list:
    """Seconds of each timed reset of scenario ``name`` with the code of checkout ``tree`` (a subprocess), its
    config with the fields ``extra`` over it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), name, str(resets), str(profile),
                          json.dumps(extra or {})], cwd=tree,
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"reset of {name} in {tree} failed:\n{out.stderr[-3000:]}")
    if profile:
        print(out.stderr, file=sys.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from fedsel_env.bench import SCENARIOS

    names = [str(s) for s in SCENARIOS]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", nargs="+", default=names, choices=names)
    p.add_argument("--trees", nargs="+", type=Path, default=[ROOT],
                   help="checkouts whose code to time (e.g. a `git archive` of the commit before, and .)")
    p.add_argument("--resets", type=int, default=3, help="timed resets per (scenario, tree, repeat)")
    p.add_argument("--repeats", type=int, default=2, help="turns each tree takes per scenario")
    p.add_argument("--variant", nargs="+", default=None, metavar="FIELD=VALUE",
                   help="time each tree also with these config fields (e.g. pca_fit=gram), interleaved")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print cProfile's top N functions (cumulative) of the timed resets to stderr")
    p.add_argument("--floor", action="store_true",
                   help="also measure each scenario's reset floor (bench/bench_floor.py's reset_floor)")
    args = p.parse_args()
    trees = [t.resolve() for t in args.trees]
    from agents.training.cli import parse_key_values

    try:
        variant = parse_key_values(args.variant or [], "variant")
    except ValueError as e:
        p.error(str(e))
    runs = [(t, {}) for t in trees] + ([(t, variant) for t in trees] if variant else [])
    print(f"# {platform.node()}  {os.cpu_count()} CPUs  python {platform.python_version()}  one torch thread")
    for i, t in enumerate(trees):
        rev = subprocess.run(["git", "-C", str(t), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        print(f"# tree {i}: {t} ({rev.stdout.strip() or 'not a git checkout'})")
    print(f"# load before: {os.getloadavg()}")
    if variant:
        print(f"# variant: {' '.join(args.variant)} (the columns marked +)")
    names_of = [f"tree {i % len(trees)}{' +' if i >= len(trees) else ''}" for i in range(len(runs))]
    floor_cols = ["GFLOP", "floor: profiling round s", "floor: PCA fit s (Gram / scikit-learn)", "floor s"] + \
        [f"floor / {n} min" for n in names_of] if args.floor else []
    if args.floor:
        import torch

        torch.set_num_threads(1)
        from bench.bench_floor import reset_floor, reset_flops, scenario_shape
    print("| scenario | " + " | ".join([f"{n} mean s | {n} min s" for n in names_of] + floor_cols) + " | load |")
    print("|---|" + "---:|" * (2 * len(runs) + len(floor_cols) + 1))
    for name in args.scenarios:
        times = {i: [] for i in range(len(runs))}
        for _ in range(args.repeats):
            for i, (t, extra) in enumerate(runs):
                times[i] += reset_times(t, name, args.resets, args.profile, extra)
        cells = [f"{sum(times[i]) / len(times[i]):.3f} | {min(times[i]):.3f}" for i in range(len(runs))]
        if args.floor:
            shape, data = scenario_shape(name)
            fl = reset_floor(shape, data)
            cells += [f"{sum(reset_flops(shape).values()) / 1e9:.2f}", f"{fl['profiling round']:.3f}",
                      f"{fl['PCA fit']:.3f} ({fl['Gram fit']:.3f} / {fl['scikit-learn fit']:.3f})",
                      f"{fl['floor']:.3f}"] + [f"{fl['floor'] / min(times[i]):.2f}" for i in range(len(runs))]
        print(f"| {name} | " + " | ".join(cells) + f" | {os.getloadavg()[0]:.1f} |", flush=True)
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
