"""Churn: do the token directions the oracle's picks lean towards, weighted by hand, reproduce the oracle? (issue #29)

    .venv/bin/python experiments/churn_oracle_directions.py

``bench_learned.py --part picks`` found the oracle's Churn picks more recently and more often selected than the
ES models' (``rounds_since_selected`` −1.0, ``participation_rate`` +0.7, standardised). This plays ``set_es``
with weight only on such columns (and a few others for comparison) on Churn's tuning seeds 100–109, beside
``pow_d`` (seed 0) and random, and prints each one's mean worst-10% accuracy. Tuning seeds only: nothing here
touches a reporting seed. docs/TRAINING.md quotes the figures.
"""
from __future__ import annotations

import numpy as np


def main() -> None:
    import torch

    torch.set_num_threads(1)
    from agents.registry import make
    from agents.set_es import SetESAgent, param_names
    from fedsel_env.bench import scenario
    from fedsel_env.env import FedSelectEnv
    from fedsel_eval.bench import objectives

    sc = scenario("Churn")
    env = FedSelectEnv(config=sc.env_config())
    names = param_names(env.selection_spec)
    seeds = list(range(100, 110))

    def weights(**kw: float) -> np.ndarray:
        th = np.zeros(len(names))
        for k, v in kw.items():
            th[names.index(k)] = v
        return th

    for label, pol in (("pow_d", lambda s: make("pow_d", s, seed=0)), ("random", lambda s: make("random", s, seed=0))):
        print(f"{label:28s} {np.mean(objectives(env, sc, pol, seeds)[0]):.3f}")
    for label, th in (("-rounds_since_selected", weights(rounds_since_selected=-1)),
                      ("+participation_rate", weights(participation_rate=1)),
                      ("both", weights(rounds_since_selected=-1, participation_rate=1)),
                      ("both +in_cover", weights(rounds_since_selected=-1, participation_rate=1, in_cover=0.5)),
                      ("+rounds_since_selected", weights(rounds_since_selected=1)),
                      ("+loss (stale)", weights(loss=1))):
        print(f"{label:28s} {np.mean(objectives(env, sc, lambda s: SetESAgent(s, model=th), seeds)[0]):.3f}")
    env.close()


if __name__ == "__main__":
    main()
