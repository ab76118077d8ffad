"""Recorded trajectories from before the redesign (issue #14), and the rule that compares a replay with them.

``python tests/golden.py`` wrote ``tests/data/golden_trajectories.npz`` once, with the code of commit
30396ac (before the simulator / server view / env split) on one torch thread. ``tests/test_golden.py``
replays the same seeds and actions on the current code and compares every observation, reward, flag and
numeric ``info`` entry by :func:`compare`: what must be exact exactly, the floats to the tolerances of
:data:`FLOAT_TOLERANCE` and :data:`PCA_TOLERANCE`, which were measured (issue #26) because the recording was made on another CPU and float
reductions round differently on another CPU's SIMD and BLAS paths. Regenerate the file only for a change
that is meant to alter trajectories, and say so in the commit. Re-recorded since: ``tiny_one_1k`` (issue #45,
``python tests/golden.py tiny_one_1k``): a step of s = 1/K puts s of its exchange time on the clock, so its
``round_time`` and ``clock`` are 1/K of the first recording's; its other arrays are the first recording's (they replay within the tolerances).
"""
from __future__ import annotations

from pathlib import Path
import re
from typing import Dict, List

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


#: ``info`` entries and other fields that are integers, ids or flags: compared exactly, on every CPU
EXACT_FIELDS = ("flags", "info_round", "info_selected", "info_responders", "info_participation", "info_dropped",
                "info_late", "info_updates_sent")

#: The float tolerances, per field, relative to the field's largest magnitude in that step (so a value
#: near 0 in a vector of O(1) values is not held to a relative bound it cannot meet).
#:
#: Measured (``python tests/golden_drift.py``, issue #26) by replaying every case on this machine's other
#: kernel paths — torch's ``ATEN_CPU_CAPABILITY=default`` / ``avx2`` instead of AVX-512, MKL's
#: ``MKL_CBWR=COMPATIBLE`` / ``MKL_ENABLE_INSTRUCTIONS=AVX2``, OpenBLAS's ``OPENBLAS_CORETYPE=Prescott`` —
#: and from the report of issue #26 (another AMD EPYC generation): the float32 quantities differ by at most
#: 1 float32 ulp (1.2e-7 relative: the client features, e.g. 2.7439313 against 2.7439315), the losses by
#: 2.4e-8 relative; accuracies, rewards, round times and the clock were identical on every path. The
#: PCA coordinates (``weights``, and the flat observation that starts with them) are the exception: FAVOR's
#: basis comes from LAPACK's SVD, whose components of nearly equal variance turn with the kernel, and
#: coordinates of later models are differences of nearly equal numbers; they moved by up to 4.5% of
#: their scale (``MKL_CBWR=COMPATIBLE``), 1% on the other EPYC.
#:
#: The bound for everything else, 1e-6 of the field's scale (8 float32 ulps), is 8× the largest drift
#: measured and far below any change of behaviour: an accuracy moves by at least one test sample
#: (1/n >= 1e-3), a different client changes the exact fields, and a 0.1% change of the learning rate
#: moves the losses by ~1e-4 (``test_a_real_change_of_behaviour_fails``).
FLOAT_TOLERANCE = 1e-6
PCA_TOLERANCE = 0.10


def _field(key: str) -> str:
    """The field a recorded key belongs to: ``obs3_clients`` -> ``obs_clients``, ``info_loss_2`` -> ``info_loss``."""
    m = re.match(r"obs\d+(?:_(.*))?$", key)
    if m:
        return "obs_" + (m.group(1) or "flat")
    return re.sub(r"_\d+$", "", key)


def compare(case: str, got: Dict[str, np.ndarray], expected: Dict[str, np.ndarray]) -> List[str]:
    """Every way ``got`` (a replay of ``case``) differs from ``expected`` beyond the tolerances; [] when none."""
    from fedsel_env.spec import FEATURE_INDEX

    flag_columns = [FEATURE_INDEX["selected_last_round"], FEATURE_INDEX["responded_last_round"]]
    flat_case = CASES[case][1].get("observation") == "flat"
    if set(got) != set(expected):
        return [f"{case}: different steps or keys: {sorted(set(got) ^ set(expected))[:6]}"]
    problems = []
    for key, want in expected.items():
        have, field = got[key], _field(key)
        if case in FLAGS_CHANGED and field == "obs_clients":
            keep = [c for c in range(want.shape[1]) if c not in flag_columns]
            want, have = want[:, keep], have[:, keep]
        if have.shape != want.shape:
            problems.append(f"{case}/{key}: shape {have.shape} != {want.shape}")
            continue
        if field in EXACT_FIELDS or want.dtype.kind not in "fc":
            if not np.array_equal(have, want, equal_nan=True):
                problems.append(f"{case}/{key} differs (compared exactly): {have.ravel()[:8]} != {want.ravel()[:8]}")
            continue
        pca = field == "obs_weights" or (flat_case and field == "obs_flat")
        scale = float(np.nanmax(np.abs(want))) if want.size and not np.all(np.isnan(want)) else 0.0
        bound = (PCA_TOLERANCE if pca else FLOAT_TOLERANCE) * max(scale, np.finfo(np.float32).tiny)
        if not np.allclose(have, want, rtol=0.0, atol=bound, equal_nan=True):
            worst = float(np.nanmax(np.abs(have.astype(np.float64) - want.astype(np.float64))))
            problems.append(f"{case}/{key} differs by {worst:.3g}, more than {bound:.3g} "
                            f"({PCA_TOLERANCE if pca else FLOAT_TOLERANCE:g} of its scale {scale:.3g})")
    return problems


def recorded(case: str) -> Dict[str, np.ndarray]:
    """The recording of one case."""
    with np.load(FILE) as rec:
        return {k.split("/", 1)[1]: rec[k] for k in rec.files if k.startswith(case + "/")}


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


def trajectory(case: str, **overrides) -> Dict[str, np.ndarray]:
    """One case's trajectory, played on one torch thread (float sums differ bit-wise across thread counts);
    ``overrides`` are config fields laid over the case's (to play it with ``workers=2``, or break it)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _trajectory(case, overrides)
    finally:
        torch.set_num_threads(threads)


def _trajectory(case: str, overrides: dict) -> Dict[str, np.ndarray]:
    from fedsel_env.env import FedSelectEnv

    preset, over, steps = CASES[case]
    env = FedSelectEnv(config={**over, **overrides}, preset=preset)
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
            # improved_fraction is left out of info when not measured (recorded as NaN before issue #45)
            out[f"info_{key}"].append(np.asarray(info.get(key, np.nan), dtype=np.float64).reshape(-1))
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


def rerecord(cases: List[str]) -> Dict[str, List[str]]:
    """Replay ``cases`` and write into :data:`FILE` only the arrays that now differ beyond the tolerances
    (:func:`compare`), keeping every other array — and every other case — as first recorded (on another CPU:
    re-recording them here would move them all by this CPU's rounding). For a change meant to alter some
    quantities of a case; returns the keys re-recorded per case."""
    with np.load(FILE) as old:
        arrays = {k: old[k] for k in old.files}
    changed: Dict[str, List[str]] = {}
    for case in cases:
        got, want = trajectory(case), recorded(case)
        if set(got) != set(want):
            raise SystemExit(f"{case}: the replay has other steps or keys; re-record it whole "
                             f"(python tests/golden.py --all {case})")
        changed[case] = [k for k in want if compare(case, {k: got[k]}, {k: want[k]})]
        for k in changed[case]:
            arrays[f"{case}/{k}"] = got[k]
    np.savez_compressed(FILE, **arrays)
    return changed


if __name__ == "__main__":
    # ``python tests/golden.py`` records every case afresh; ``python tests/golden.py CASE ...`` re-records only
    # what moved beyond the tolerances in those cases (:func:`rerecord`; issue #45 did so for tiny_one_1k:
    # a 1/K step's clock); ``--all CASE ...`` re-records those cases whole.
    import sys

    args = sys.argv[1:]
    whole = bool(args) and args[0] == "--all"
    cases = (args[1:] if whole else args) or list(CASES)
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; cases: {list(CASES)}")
    if args and not whole:
        for case, keys in rerecord(cases).items():
            print(f"re-recorded {case}: {', '.join(keys) or 'nothing (within the tolerances)'}")
        print("wrote", FILE)
        raise SystemExit(0)
    arrays = {}
    if whole:
        with np.load(FILE) as old:
            arrays = {k: old[k] for k in old.files if k.split("/", 1)[0] not in cases}
    for case in cases:
        for k, v in trajectory(case).items():
            arrays[f"{case}/{k}"] = v
        print("recorded", case)
    np.savez_compressed(FILE, **arrays)
    print("wrote", FILE)
