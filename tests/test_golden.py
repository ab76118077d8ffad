"""Trajectories recorded before the redesign (issue #14) replay bit for bit on the current code.

Everything the simulator computes (accuracies, losses, rewards, the client features, the info fields)
must match the recording bit for bit. The PCA coordinates of the observation (``*_weights``, and the
flat observation, which starts with them) come from LAPACK, whose kernels differ between CPUs: on an AMD
EPYC machine they differ from the recording (made on another CPU) by up to 1% of their scale, growing
from 1e-16 at reset, with every other key identical. They are compared to 5% of their scale.
"""
import numpy as np
import pytest

from fedsel_env.spec import FEATURE_INDEX

from golden import CASES, FILE, FLAGS_CHANGED, trajectory

#: the PCA coordinates' tolerance, relative to their largest magnitude (they depend on the CPU's LAPACK)
PCA_TOLERANCE = 0.05
FLAT_CASES = [c for c, (_, cfg, _) in CASES.items() if cfg.get("observation") == "flat"]
FLAG_COLUMNS = [FEATURE_INDEX["selected_last_round"], FEATURE_INDEX["responded_last_round"]]


@pytest.mark.parametrize("case", list(CASES))
def test_trajectory_replays_bit_for_bit(case):
    recorded = np.load(FILE)
    expected = {k.split("/", 1)[1]: recorded[k] for k in recorded.files if k.startswith(case + "/")}
    got = trajectory(case)
    assert set(got) == set(expected), f"{case}: different steps or keys"
    for key, want in expected.items():
        have = got[key]
        if case in FLAGS_CHANGED and key.endswith("_clients"):
            keep = [c for c in range(want.shape[1]) if c not in FLAG_COLUMNS]
            want, have = want[:, keep], have[:, keep]
        assert have.shape == want.shape, f"{case}/{key}: shape {have.shape} != {want.shape}"
        if key.endswith("_weights") or (case in FLAT_CASES and key.startswith("obs") and "_" not in key):
            scale = float(np.nanmax(np.abs(want))) if want.size else 0.0
            assert np.allclose(have, want, rtol=0.0, atol=PCA_TOLERANCE * scale, equal_nan=True), \
                f"{case}/{key} differs from the recording by more than {PCA_TOLERANCE:.0%} of its scale"
            continue
        assert np.array_equal(have, want, equal_nan=True), f"{case}/{key} differs from the recording"
