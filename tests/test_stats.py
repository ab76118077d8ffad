"""The project's one Student-t interval and test (issue #46: ``fedsel_eval.stats.t_interval`` / ``paired_t``), checked
against scipy's own ``ttest_rel`` / ``ttest_1samp`` / ``t.interval`` on small cases, and the forms its callers keep."""
import math

import numpy as np
import pytest
from scipy import stats as sp

from fedsel_eval import records
from fedsel_eval.stats import Interval, TInterval, holm, paired_t, t_interval


def test_paired_t_is_scipys_paired_t_test_and_t_interval():
    a = [12.0, 15.5, 9.0, 14.0, 11.25]
    b = [10.0, 15.0, 9.5, 11.0, 10.0]
    got = paired_t(a, b)
    d = np.subtract(a, b)
    want_lo, want_hi = sp.t.interval(0.95, d.size - 1, loc=d.mean(), scale=sp.sem(d))
    assert isinstance(got, TInterval) and isinstance(got, Interval)
    assert got.n == 5
    assert got.mean == pytest.approx(1.25)  # (2 + 0.5 - 0.5 + 3 + 1.25) / 5
    assert (got.lo, got.hi) == (pytest.approx(want_lo, rel=1e-12), pytest.approx(want_hi, rel=1e-12))
    assert got.p == pytest.approx(sp.ttest_rel(a, b).pvalue, rel=1e-12)
    # the interval by hand: mean ± t_{0.975, n-1} · s / √n
    half = sp.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert got.hi - got.mean == pytest.approx(half, rel=1e-12)


def test_t_interval_is_the_one_sample_test_and_its_level_is_a_parameter():
    x = [0.3, -0.1, 0.45, 0.2]
    got = t_interval(x, confidence=0.9)
    lo, hi = sp.t.interval(0.9, 3, loc=np.mean(x), scale=sp.sem(x))
    assert (got.lo, got.hi) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert got.p == pytest.approx(sp.ttest_1samp(x, 0.0).pvalue, rel=1e-12)
    assert t_interval(x).hi > got.hi  # 95% is wider than 90%


def test_missing_values_few_values_and_equal_values():
    assert t_interval([1.0, None, float("nan"), 3.0]).n == 2  # a metric not measured is left out
    none = t_interval([])
    assert none.n == 0 and math.isnan(none.mean) and none.text("+.1f") == "—"
    one = t_interval([2.5])
    assert (one.mean, one.n) == (2.5, 1) and math.isnan(one.lo) and math.isnan(one.p)
    same = t_interval([4.0, 4.0, 4.0])
    assert (same.lo, same.hi) == (4.0, 4.0) and math.isnan(same.p)  # the test is undefined, not p = 0
    # a pair with a missing side is not a pair
    assert paired_t([1.0, None, 3.0], [0.0, 5.0, float("nan")]).n == 1


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="paired_t: a has 3 values and b 2"):
        paired_t([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="confidence 95"):
        t_interval([1.0, 2.0], confidence=95)


def test_the_record_form_is_the_committed_records_form():
    """``fedsel_eval.records``' ``t_interval`` / ``paired_t`` summaries are this interval in JSON form: the keys the
    committed records hold (no ``p``: a recomputed summary must equal the stored one), NaN as None."""
    iv = t_interval([1.0, 2.0, 4.0])
    assert records.t_interval([1.0, 2.0, 4.0]) == iv.record() == {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": 3}
    assert records.t_interval([7.0]) == {"mean": 7.0, "lo": None, "hi": None, "n": 1}
    assert records.t_interval([]) == {"mean": None, "lo": None, "hi": None, "n": 0}
    one = t_interval([7.0]).figures()  # the studies' results.json form keeps NaN
    assert one["mean"] == 7.0 and math.isnan(one["lo"]) and math.isnan(one["hi"]) and one["n"] == 1


def test_paired_t_across_training_seeds_is_t_interval_over_the_seeds_means():
    rows = [{"policy": p, "training_seed": ts, "seed": s, "v": v}
            for p, ts, s, v in [("a", 0, 1, 5.0), ("a", 0, 2, 7.0), ("a", 1, 1, 4.0), ("a", 1, 2, 4.0),
                                ("a", 2, 1, 9.0), ("a", 2, 2, 6.0)]]
    rows += [{"policy": "r", "seed": 1, "v": 3.0}, {"policy": "r", "seed": 2, "v": 5.0}]
    got = records.compute({"name": "x", "stat": "paired_t_across", "field": "v", "where": {"policy": "a"},
                           "minus": {"policy": "r"}}, rows)
    per_seed = [2.0, 0.0, 3.5]  # each training seed's mean difference
    assert got == {**t_interval(per_seed).record(), "per_training_seed": per_seed}


def test_holm_adjusts_ps_of_the_t_tests():
    ps = [paired_t([1.0, 2.0, 3.5], [0.0, 0.5, 1.0]).p, t_interval([0.1, -0.2, 0.05]).p]
    got = holm(ps)
    lo, hi = sorted(ps)
    assert got[ps.index(lo)] == pytest.approx(min(1.0, 2 * lo))
    assert got[ps.index(hi)] == pytest.approx(max(min(1.0, 2 * lo), hi))
