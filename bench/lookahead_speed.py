"""The lookahead oracle's candidate rounds side by side against one after another (``batch_candidates``).

``agents/lookahead.py`` plays M candidate rounds a step (the bench reference's oracle, ``set_distill``'s teacher, the
``--part picks`` analysis). With ``batch_candidates`` (the default) the candidates are played on copies of the round
state and their requests answered together by ``fedsel_env.vector_training.drive`` — one fused local training of
every candidate's clients, as the vector env steps its sub-envs. This script plays each bench scenario's episode on
reporting seed 9000 with two oracles of the same seed, one of each kind, both planning on the same state every round
(timed in turn, so each ratio compares measurements a second apart), checks that their candidates and scores are
equal bit for bit, and prints the planning seconds a round and the ratio::

    .venv/bin/python bench/lookahead_speed.py                       # every bench scenario, 6 rounds each
    .venv/bin/python bench/lookahead_speed.py --scenarios Churn --rounds 20
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(name: str, rounds: int, candidates: int, seed: int) -> dict:
    """Planning seconds per round, one after another and side by side, on the same states; raises when the two
    oracles' candidates or scores differ."""
    import agents
    from fedsel_env.bench import scenario
    from fedsel_env.env import FedSelectEnv

    sc = scenario(name)
    env = FedSelectEnv(config=sc.env_config())
    try:
        obs, _ = env.reset(seed=seed)
        oracles = {batch: agents.make("lookahead", env.selection_spec, seed=seed, objective=sc.objective,
                                      candidates=candidates, batch_candidates=batch) for batch in (False, True)}
        for o in oracles.values():
            o.bind(env)
            o.reset(obs)
        seconds = {False: 0.0, True: 0.0}
        played = 0
        for _ in range(rounds):
            plans = {}
            for batch, o in oracles.items():
                start = time.perf_counter()
                plans[batch] = o.plan(obs)
                seconds[batch] += time.perf_counter() - start
            (c0, s0), (c1, s1) = plans[False], plans[True]
            if [c.tolist() for c in c0] != [c.tolist() for c in c1] or s0.tobytes() != s1.tobytes():
                raise AssertionError(f"{name}: the side-by-side candidates or scores differ from one after another")
            obs, _, term, trunc, _ = env.step(oracles[True].to_action(c1[int(np.argmax(s1))]))
            played += 1
            if term or trunc:
                break
        return {"scenario": name, "rounds": played, "candidates": len(c1), "one_by_one": seconds[False] / played,
                "side_by_side": seconds[True] / played, "load": os.getloadavg()[0]}
    finally:
        env.close()


def main() -> None:
    from fedsel_env.bench import SCENARIOS

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--candidates", type=int, default=16, help="M (the bench's oracle plays 16)")
    p.add_argument("--seed", type=int, default=9000)
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    print("| scenario | rounds | candidates a round | one after another (s a round) | side by side (s a round) | "
          "speed-up | load |\n|---|---:|---:|---:|---:|---:|---:|")
    for name in args.scenarios:
        r = measure(name, args.rounds, args.candidates, args.seed)
        print(f"| {r['scenario']} | {r['rounds']} | {r['candidates']} | {r['one_by_one']:.3f} | {r['side_by_side']:.3f} "
              f"| {r['one_by_one'] / r['side_by_side']:.2f}× | {r['load']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
