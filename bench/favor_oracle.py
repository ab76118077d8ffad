"""What could a perfect FAVOR Q-function achieve? The one-step lookahead oracle (issue #5; docs/SPEC.md §4).

FAVOR trains its Double DQN in the ``one`` action mode (one client per round) and deploys it in
``topk`` (the K clients with the highest Q-values). The best a myopic one-mode Q-function can learn is
the immediate reward of training each client alone from the current state. This script computes that
exactly, by simulation: at every round of a deployed top-K episode it copies the env, plays one
``one``-mode step with each available client, and scores the client by the accuracy that step reaches
(the reward Ξ^(acc−Ω) − 1 is increasing in it). The K best-scored clients form the round, so the
result is what top-K deployment of a perfectly learned one-step Q would give.

``--step`` is the ``one``-mode step it looks ahead with: ``1`` is the paper's (the global model
becomes the selected client's model); ``1/K`` is ``one_mode_step: 1/K`` (the global model moves 1/K
of the way to it: the client's share of a K-client round). Uniform random selection runs on the same
seeds for the paired comparison.

The oracle is an agent, :class:`agents.one_step_oracle.OneStepOracle`, which ``evaluate.py`` and ``fedsel_eval``
run by its import path (``--policy oracle=agents.one_step_oracle:OneStepOracle:step=1/K``; it must be bound to its
env, as they bind every agent): ``experiments/per_client_analysis.py`` (issue #19) plays it that way; this script
plays it against random selection.

Usage:  python bench/favor_oracle.py [--step 1/K|1] [--episodes 10] [--first-seed 1000]
Results are printed and written to runs/bench/favor_oracle_<preset>_<step>.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch

from agents.one_step_oracle import OneStepOracle, one_mode_step

ROOT = Path(__file__).resolve().parents[1]


def run(step_text: str, episodes: int, first_seed: int, config: Dict[str, Any]) -> Dict[str, Any]:
    import agents
    from fedsel_env.env import FedSelectEnv

    env = FedSelectEnv(config=config)
    budget = env.config["max_rounds"]
    rounds: Dict[str, List[int]] = {"oracle": [], "random": []}
    t0 = time.perf_counter()
    for i in range(episodes):
        seed = first_seed + i
        for name in ("oracle", "random"):
            policy = OneStepOracle(env.selection_spec, step=step_text) if name == "oracle" else \
                agents.make("random", env.selection_spec, seed=seed)
            obs, _ = env.reset(seed=seed)
            policy.bind(env)
            done, n = False, 0
            while not done:
                action, _ = policy.predict(obs)
                obs, _, terminated, truncated, _ = env.step(action)
                done, n = terminated or truncated, n + 1
            rounds[name].append(n if terminated else budget)
        print(f"seed {seed}: oracle {rounds['oracle'][-1]} rounds, random {rounds['random'][-1]}", flush=True)
    diff = np.asarray(rounds["oracle"]) - np.asarray(rounds["random"])
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    out = {"step": step_text, "episodes": episodes, "seeds": [first_seed, first_seed + episodes - 1],
           "oracle_mean_rounds": float(np.mean(rounds["oracle"])), "random_mean_rounds": float(np.mean(rounds["random"])),
           "paired_rounds_difference": float(diff.mean()), "paired_rounds_difference_se": se,
           "seconds": time.perf_counter() - t0, "per_episode": rounds, "config": config}
    print(f"one-step oracle with one-mode step {step_text}: {out['oracle_mean_rounds']:.1f} rounds to "
          f"{env.config['target_accuracy']:.0%}, random {out['random_mean_rounds']:.1f}; paired difference "
          f"{diff.mean():+.2f} ± {se:.2f} rounds (standard error)")
    return out


def main(argv: List[str] | None = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="1/K", help='the one-mode step looked ahead with: "1/K" or a number in (0, 1]')
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=1000)
    p.add_argument("--preset", default="default")
    args = p.parse_args(argv)
    try:
        one_mode_step(args.step, 1)
    except ValueError:
        p.error(f'--step {args.step!r}: expected "1/K" or a number in (0, 1]')
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    torch.set_num_threads(1)
    # the federation FAVOR trains and is evaluated on (configs/favor.yml: federation_seed 0)
    out = run(args.step, args.episodes, args.first_seed, {"preset": args.preset, "federation_seed": 0})
    dest = ROOT / "runs" / "bench" / f"favor_oracle_{args.preset}_{args.step.replace('/', '_')}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1))
    print(f"written {dest}")
    return out


if __name__ == "__main__":
    main()
