"""Recorded trajectories from before the redesign (issue #14): the env must replay them bit for bit.

``python tests/golden.py`` wrote ``tests/data/golden_trajectories.npz`` once, with the code of commit
30396ac (before the simulator / server view / env split) on one torch thread; ``tests/test_golden.py`` replays the same seeds and actions on
the current code and compares every observation, reward, flag and the numeric ``info`` entries exactly.
Regenerate it only for a change that is meant to alter trajectories, and say so in the commit.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np

FILE = Path(__file__).parent / "data" / "golden_trajectories.npz"

#: case name -> (preset, config overrides, steps)
CASES = {
    "default": ("default", {}, 4),
    "tiny": ("tiny", {}, 5),
    "hetero": ("hetero", {}, 3),
    "tiny_one": ("tiny", {"action_mode": "one", "max_rounds": 6}, 6),
    "tiny_subset_flat": ("tiny", {"action_mode": "subset", "observation": "flat",
                                  "flat_parts": ["weights", "clients", "progress"]}, 4),
    "tiny_adversary": ("tiny", {"adversary": {"attacker_fraction": 0.25, "loss_scale": 3.0, "update_scale": 2.0,
                                              "dropout": 0.2, "straggler_fraction": 0.25, "deadline": 6.0}}, 5),
    "tiny_freerider_qfedsgd": ("tiny", {"aggregator": "qfedsgd", "aggregator_params": {"q": 1.0},
                                        "adversary": {"attackers": [1, 2], "free_rider": True}}, 4),
    "tiny_fedmgda_evalevery": ("tiny", {"aggregator": "fedmgda+", "eval_every": 2}, 4),
    # one_mode_step 1/K: issue #14 makes the "last round" flags mean the last step here (feedback once),
    # so the test compares every other column of this case.
    "tiny_one_1k": ("tiny", {"action_mode": "one", "one_mode_step": "1/K", "max_rounds": 3}, 8),
}
#: cases whose selected_last_round / responded_last_round columns changed on purpose
FLAGS_CHANGED = ("tiny_one_1k",)
INFO_KEYS = ("round", "accuracy", "loss", "round_time", "clock", "improved_fraction", "updates_sent",
             "client_accuracies", "selected", "responders", "participation", "dropped", "late",
             "honest_acc_mean", "attacker_response_share")


def _action(env, rng: np.random.Generator, obs):
    """A valid action drawn from ``rng`` for the coming round (available clients only)."""
    mode, n, k = env.config["action_mode"], env.num_clients, env.k
    avail = np.flatnonzero(env.action_masks())
    if mode == "one":
        return int(rng.choice(avail))
    if mode == "topk":
        scores = rng.random(n).astype(np.float32)
        return scores
    pick = rng.choice(avail, size=min(k, avail.size), replace=False)
    a = np.zeros(n, dtype=np.int8)
    a[pick] = 1
    return a


def trajectory(case: str) -> Dict[str, np.ndarray]:
    """One case's trajectory, played on one torch thread (float sums differ bit-wise across thread counts)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _trajectory(case)
    finally:
        torch.set_num_threads(threads)


def _trajectory(case: str) -> Dict[str, np.ndarray]:
    from fedsel_env.env import FedSelectEnv

    preset, over, steps = CASES[case]
    env = FedSelectEnv(config=over, preset=preset)
    rng = np.random.default_rng(7)
    obs, info = env.reset(seed=3)
    out: Dict[str, list] = {"obs": [obs], "reward": [], "flags": [], "reset_acc": [info["accuracy"]]}
    for key in INFO_KEYS:
        out[f"info_{key}"] = []
    for _ in range(steps):
        obs, r, term, trunc, info = env.step(_action(env, rng, obs))
        out["obs"].append(obs)
        out["reward"].append(r)
        out["flags"].append([term, trunc])
        for key in INFO_KEYS:
            out[f"info_{key}"].append(np.asarray(info[key], dtype=np.float64).reshape(-1))
        if term or trunc:
            break
    env.close()
    flat: Dict[str, np.ndarray] = {}
    for i, o in enumerate(out.pop("obs")):
        if isinstance(o, dict):
            for k, v in o.items():
                flat[f"obs{i}_{k}"] = v
        else:
            flat[f"obs{i}"] = o
    for key, seq in out.items():
        if key.startswith("info_"):
            for i, v in enumerate(seq):
                flat[f"{key}_{i}"] = v
        else:
            flat[key] = np.asarray(seq, dtype=np.float64)
    return flat


if __name__ == "__main__":
    arrays = {}
    for case in CASES:
        for k, v in trajectory(case).items():
            arrays[f"{case}/{k}"] = v
        print("recorded", case)
    np.savez_compressed(FILE, **arrays)
    print("wrote", FILE)
