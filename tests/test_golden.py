"""Trajectories recorded before the redesign (issue #14) replay bit for bit on the current code."""
import numpy as np
import pytest

from fedsel_env.spec import FEATURE_INDEX

from golden import CASES, FILE, FLAGS_CHANGED, trajectory

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
        assert np.array_equal(have, want, equal_nan=True), f"{case}/{key} differs from the recording"
