"""Holm's step-down correction (fedsel_eval.stats.holm), the correction the RL leaderboards report (issue #41)."""
import math

import pytest

from fedsel_eval.stats import holm


def test_holm_on_a_hand_worked_family():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (monotone)
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert got == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_keeps_untestable_comparisons_out_of_m():
    got = holm([0.5, math.nan, 0.6])
    assert got[0] == 1.0 and got[2] == 1.0 and math.isnan(got[1])
    assert holm([0.02, math.nan]) == [0.02, pytest.approx(math.nan, nan_ok=True)]
    assert holm([]) == []
