"""The evaluation's results (issue #16): bootstrap CIs, paired differences against a reference policy, a
missed target counted as the cap, the main and fairness tables' width, and the figures drawn from them.

Most tests use hand-made episode records (no episode runs), over a real plan of the tiny preset."""
import math
import random

import numpy as np
import pytest
from scipy import stats as scipy_stats

import fedsel_eval as ev
from fedsel_eval import stats, tables
from fedsel_eval.summary import METRICS


def record(policy, seed, rounds_to_target=None, backend="fedavg", cap=5, final=0.5, jain=0.8, clients=4):
    """One episode record of the evaluation's form: it reached Ω at ``rounds_to_target`` (None: missed it)."""
    reached = rounds_to_target is not None
    rounds = rounds_to_target if reached else cap
    clock = [2.0 * t for t in range(rounds + 1)]
    metrics = {k: 0.1 for k in METRICS}
    metrics.update(rounds_to_target=rounds_to_target, time_to_target=clock[-1] if reached else None,
                   final_accuracy=final, jain_index=jain, sim_time=clock[-1], rounds=float(rounds))
    return {"key": f"{policy}|{backend}|{seed}", "policy": policy, "backend": backend, "seed": seed,
            "reached": reached, "diverged": False, "metrics": metrics,
            "curves": {"accuracy": list(np.linspace(0.1, final, rounds + 1)), "clock": clock,
                       "round_time": [2.0] * rounds},
            "clients": {"accuracy": [final] * clients, "participation": [rounds] * clients}}


@pytest.fixture(scope="module")
def plan():
    return ev.make_plan(env="tiny", policies=["random", "afl", "a_policy_label_far_longer_than_a_cell=fedcs"],
                        aggregators=["fedavg", "qfedavg:q=1"], seeds=[0, 1, 2, 3], rounds=5)


def test_bootstrap_ci_contains_the_mean_and_is_scipys_percentile_interval():
    x = [3.0, 7.0, 4.0, 12.0, 5.0, 6.0]
    iv = stats.bootstrap_ci(x)
    ref = scipy_stats.bootstrap((np.array(x),), np.mean, n_resamples=stats.RESAMPLES, method="percentile",
                                confidence_level=0.95, rng=np.random.default_rng(stats.BOOTSTRAP_SEED))
    assert (iv.lo, iv.hi) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert iv.mean == pytest.approx(np.mean(x)) and iv.n == 6
    assert iv.lo < iv.mean < iv.hi and iv.hi - iv.lo < max(x) - min(x)
    rng = np.random.default_rng(1)
    for _ in range(5):  # skewed samples too
        sample = rng.exponential(size=int(rng.integers(3, 12)))
        b = stats.bootstrap_ci(sample)
        assert b.lo <= sample.mean() <= b.hi
    assert stats.bootstrap_ci(x) == iv  # seeded: a summary written twice is the same


def test_bootstrap_ci_edge_cases():
    assert stats.bootstrap_ci([4.0, 4.0, 4.0]) == stats.Interval(4.0, 4.0, 4.0, 3)
    one = stats.bootstrap_ci([2.0, math.nan])  # not measured: left out
    assert one.mean == 2.0 and one.n == 1 and math.isnan(one.lo) and one.text(".1f") == "2.0"
    assert stats.bootstrap_ci([]).text(".1f") == "—"
    assert stats.Interval(1.0, 0.5, 1.5, 3, missed=1).text("+.1f") == "+1.0 [+0.5, +1.5]*"


def test_a_missed_target_counts_as_the_cap_and_is_marked():
    hit, miss = record("p", 0, 3), record("p", 1, None, cap=5)
    assert stats.to_target(hit, "rounds_to_target", 5) == (3.0, False)
    assert stats.to_target(miss, "rounds_to_target", 5) == (5.0, True)
    assert stats.to_target(miss, "time_to_target", 5) == (10.0, True)  # the clock when it ended
    iv = stats.metric_ci([hit, miss], "rounds_to_target", 5)
    assert iv.mean == 4.0 and iv.missed == 1 and iv.text(".1f").endswith("*")


def test_paired_difference_pairs_by_seed_and_backend():
    ref = [record("random", s, r, backend=b) for b in ("fedavg", "qfedavg") for s, r in enumerate([2, 4, 5, 3])]
    # two rounds faster than random on every seed and backend, whatever the spread over seeds
    mine = [record("fast", r["seed"], r["metrics"]["rounds_to_target"] - 1, backend=r["backend"]) for r in ref]
    d = stats.paired_difference(mine, ref, "rounds_to_target", 5)
    assert (d.mean, d.lo, d.hi, d.n, d.missed) == (-1.0, -1.0, -1.0, 8, 0)
    shuffled = mine[:]
    random.Random(0).shuffle(shuffled)
    assert stats.paired_difference(shuffled, ref[::-1], "rounds_to_target", 5) == d
    # only the pairs both played; a pair where either missed Ω is marked
    partial = mine[:3] + [record("fast", 3, None, backend="fedavg")]
    p = stats.paired_difference(partial, ref, "rounds_to_target", 5)
    assert p.n == 4 and p.missed == 1 and p.mean == pytest.approx((-1 - 1 - 1 + (5 - 3)) / 4)
    with pytest.raises(ValueError, match="one per \\(seed, backend\\)"):
        stats.paired_difference(mine + mine[:1], ref, "rounds_to_target", 5)


def test_reference_policy_is_random_when_evaluated_or_the_one_named(plan):
    assert ev.resolve_reference(plan) == "random"
    assert ev.resolve_reference(plan, "afl") == "afl"
    with pytest.raises(ValueError, match=r"--reference 'fedcs' is not one of the evaluated policies .*'afl'.*"
                                         r"--policy fedcs"):
        ev.resolve_reference(plan, "fedcs")
    no_random = ev.make_plan(env="tiny", policies=["afl", "fedcs"], seeds=[0], rounds=5)
    assert ev.resolve_reference(no_random) is None


def _records(plan):
    long = plan.policies[2].label
    out = []
    for b in ("fedavg", "qfedavg(q=1)"):
        for s in range(4):
            out.append(record("random", s, 3 + s % 2, backend=b))
            out.append(record("afl", s, 2 if s < 3 else None, backend=b, jain=0.95))
            out.append(record(long, s, 4, backend=b, final=0.9))
    return out


def test_results_and_tables(plan):
    res = ev.compare(_records(plan), plan)
    assert res.reference == "random" and len(res.series) == 6
    afl = next(s for s in res.series if s.policy == "afl" and s.backend == "fedavg")
    assert afl.reached == 3 and afl.intervals["rounds_to_target"].mean == (2 + 2 + 2 + 5) / 4
    assert afl.deltas["rounds_to_target"].mean == pytest.approx(((2 - 3) + (2 - 4) + (2 - 3) + (5 - 4)) / 4)
    assert not next(s for s in res.series if s.policy == "random").deltas

    md = tables.summary_markdown(res, plan)
    lines = md.splitlines()
    assert max(map(len, lines)) <= tables.WIDTH
    rows = [line for line in lines if line.startswith("| afl ")]
    assert len(rows) == 4  # main and fairness tables, two backends
    assert "reference" in next(line for line in lines if line.startswith("| random "))
    assert "Cells marked * count an episode that missed Ω as the cap" in md
    long = plan.policies[2].label
    assert f"= `{long}`" in md and f"| {long} " not in md  # shortened in the cell, given whole below
    csv_text = tables.rows_csv(res.main_rows())
    assert csv_text.splitlines()[0].count("delta_rounds_to_target_mean") == 1
    assert "random,fedavg,4,4,0,random,3.5," in csv_text  # the reference's row: no delta cells filled
    eps = tables.episodes_csv(_records(plan), plan).splitlines()
    assert len(eps) == 1 + 24 and eps[1].startswith("random,fedavg,0,True,False,3,")


def test_a_table_without_a_reference_says_so():
    p = ev.make_plan(env="tiny", policies=["afl", "fedcs"], seeds=[0, 1], rounds=5)
    res = ev.compare([record(pol, s, 2 + s) for pol in ("afl", "fedcs") for s in (0, 1)], p)
    md = tables.main_markdown(res, p)
    assert res.reference is None and "Δ rounds" not in md.splitlines()[2]
    assert "No paired differences" in md


@pytest.mark.slow
def test_figures_are_drawn_with_and_without_a_reference(plan, tmp_path):
    paths = ev.plot_all(_records(plan), plan, tmp_path / "with")
    assert [p.name for p in paths] == list(ev.PLOT_FILES)
    p = ev.make_plan(env="tiny", policies=["afl"], seeds=[0, 1], rounds=5)
    paths = ev.plot_all([record("afl", s, None) for s in (0, 1)], p, tmp_path / "without")
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
