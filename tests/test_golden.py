"""Trajectories recorded before the redesign (issue #14) replay on the current code, on any CPU (issue #26).

What must be exact is compared exactly — the selected ids, the responders, drop-outs, late clients, the
round, the participation counts, terminated / truncated. The floats are compared to tolerances measured
on other CPU kernel paths (``tests/golden.py``'s ``FLOAT_TOLERANCE`` and ``PCA_TOLERANCE``, measured by
``bench/golden_drift.py``), because the recording was made on another CPU and float reductions round
differently there. Exact determinism is tested where it holds: the same seed twice in one process, in
another process, and with ``workers: 1`` against ``2``, bit for bit on whatever machine runs the tests.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from golden import CASES, FILE, compare, recorded, trajectory

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("case", list(CASES))
def test_trajectory_replays_the_recording(case):
    problems = compare(case, trajectory(case), recorded(case))
    assert not problems, "\n".join(problems)


def test_a_real_change_of_behaviour_fails():
    """The tolerances let a CPU's rounding through and nothing else: a different client, an accuracy off by
    one test sample, or a 0.1% change of the learning rate each fail the comparison."""
    want = recorded("tiny")
    assert not compare("tiny", {k: v.copy() for k, v in want.items()}, want)

    other_client = {k: v.copy() for k, v in want.items()}
    sel = other_client["info_selected_0"]
    sel[0] = next(c for c in range(100) if c not in sel)
    assert any("info_selected_0" in p for p in compare("tiny", other_client, want))

    one_sample = {k: v.copy() for k, v in want.items()}
    one_sample["info_accuracy_2"] = one_sample["info_accuracy_2"] + 1.0 / 1000
    assert any("info_accuracy_2" in p for p in compare("tiny", one_sample, want))

    from fedsel_env.config import DEFAULT_CONFIG, PRESETS
    lr = {**DEFAULT_CONFIG, **PRESETS["tiny"]}["lr"]
    problems = compare("tiny", trajectory("tiny", lr=lr * 1.001), want)
    assert any("info_loss" in p for p in problems), problems
    assert not any("info_selected" in p for p in problems)  # the same clients: only the update rule changed


CHILD = r"""
import json, sys
sys.path.insert(0, "tests")
from golden import CASES, compare, recorded, trajectory
import numpy as np, torch
out = {"capability": torch.backends.cpu.get_cpu_capability(), "problems": [], "differs": False}
for case in CASES:
    got, want = trajectory(case), recorded(case)
    out["problems"] += compare(case, got, want)
    out["differs"] |= any(not np.array_equal(got[k], want[k], equal_nan=True) for k in want)
    if len(sys.argv) > 1:
        np.savez(sys.argv[1] + f"/{case}.npz", **got)
print(json.dumps(out))
"""


def _replay_in_a_process(env_vars: dict, save_to=None) -> dict:
    env = {**os.environ, **env_vars}
    args = [sys.executable, "-c", CHILD] + ([str(save_to)] if save_to else [])
    res = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_other_kernel_paths_of_this_cpu_stay_within_the_tolerances():
    """Another CPU, simulated here: torch's portable kernels instead of its AVX2/AVX-512 ones, MKL's
    compatible (non-CPU-specific) code path, OpenBLAS's kernels for an old core. Every case stays within
    the tolerances; when this CPU's own path is a vectorised one the replay really differs from the
    recording (so the tolerances, not luck, are what let it pass)."""
    native = torch.backends.cpu.get_cpu_capability()
    out = _replay_in_a_process({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                                "OPENBLAS_CORETYPE": "Prescott"})
    assert not out["problems"], "\n".join(out["problems"])
    if native != "DEFAULT":
        assert out["differs"], "the portable kernels gave the recording bit for bit: the test exercised nothing"


@pytest.mark.slow
def test_same_seed_bit_for_bit_in_this_process_and_another(tmp_path):
    """On one machine the same seed and actions give the same trajectory bit for bit: twice in this process
    and once in a fresh one (every key, the PCA coordinates included)."""
    _replay_in_a_process({}, save_to=tmp_path)
    for case in CASES:
        first, second = trajectory(case), trajectory(case)
        with np.load(tmp_path / f"{case}.npz") as other:
            for key, value in first.items():
                assert np.array_equal(value, second[key], equal_nan=True), f"{case}/{key}: this process, twice"
                assert np.array_equal(value, other[key], equal_nan=True), f"{case}/{key}: another process"


@pytest.mark.parametrize("case", ["default", "tiny_adversary", "tiny_fedmgda_evalevery"])
def test_two_workers_bit_for_bit(case):
    """``workers: 2`` splits the round's training over two processes: the same trajectory, bit for bit."""
    one, two = trajectory(case), trajectory(case, workers=2)
    for key, value in one.items():
        assert np.array_equal(value, two[key], equal_nan=True), f"{case}/{key}: workers 1 against 2"
