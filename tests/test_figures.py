"""The evaluation's figures (issue #35): the headline's accuracy panel tells policies apart (the mean
accuracy over the rounds played, not the final accuracy, which every episode that reaches Ω shares), and
time and accuracy axes and their confidence bands stay within what the values can be."""
from pathlib import Path

import numpy as np
import pytest

import fedsel_eval as ev
from fedsel_eval import plots
from fedsel_eval.results import compare


def record(policy, seed, accuracy, round_time, backend="fedavg", omega=0.9):
    rounds = len(accuracy) - 1
    reached = accuracy[-1] >= omega
    clock = list(np.cumsum([0.0] + list(round_time)))
    return {"key": f"{policy}|{backend}|{seed}", "policy": policy, "backend": backend, "seed": seed,
            "reached": reached, "diverged": False,
            "metrics": {"rounds_to_target": rounds if reached else None, "time_to_target": clock[-1] if reached else None,
                        "final_accuracy": accuracy[-1], "jain_index": 0.9, "acc_std": 0.1, "acc_worst10": 0.5,
                        "acc_best10": 1.0, "min_participation_rate": 0.1, "sim_time": clock[-1], "rounds": rounds},
            "curves": {"accuracy": list(accuracy), "clock": clock, "round_time": list(round_time)},
            "clients": {"accuracy": [accuracy[-1]] * 8, "participation": [1] * 8}}


def test_accuracy_auc_holds_a_stopped_episode_and_skips_rounds_not_evaluated():
    r = record("random", 0, [0.1, 0.5, 0.9], [1.0, 1.0])
    assert plots.accuracy_auc(r, 5) == pytest.approx(np.mean([0.1, 0.5, 0.9, 0.9, 0.9]))
    r["curves"]["accuracy"] = [0.1, None, 0.9]  # eval_every = 2: round 1 not evaluated
    assert plots.accuracy_auc(r, 3) == pytest.approx(np.mean([0.1, 0.9]))


@pytest.fixture(scope="module")
def plan():
    return ev.make_plan(env="tiny", policies=["random", "fedcs"], seeds=[0, 1, 2], rounds=5, target=0.9)


def test_headline_accuracy_panel_separates_policies_that_share_their_final_accuracy(plan, monkeypatch):
    # both reach Ω = 0.9 on every seed (equal final accuracy); fedcs gets there in 2 rounds, random in 4
    recs = [record("random", s, [0.1, 0.3, 0.5, 0.7, 0.9], [3.0, 4.0, 5.0, 6.0]) for s in range(3)]
    recs += [record("fedcs", s, [0.1, 0.6 + 0.01 * s, 0.9], [1.0, 1.0 + s]) for s in range(3)]
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    results = compare(recs, plan)
    series = plots._series(recs, results)
    plots.plot_headline(series, results, plan, Path("headline.png"))  # the figure is captured, not written
    fig = figures[0]
    acc_axis, acc_delta = fig.axes[2], fig.axes[5]
    assert "mean accuracy over rounds 0–4" in acc_axis.get_title()
    # fedcs: mean of [0.1, 0.6 + 0.01 s, 0.9, 0.9, 0.9] = 0.682 over the seeds, random 0.5: the Δ bar sits at +0.182
    means = {s.label: np.mean([plots.accuracy_auc(r, 5) for r in s.eps]) for s in series}
    assert means["fedcs"] - means["random"] == pytest.approx(0.182, abs=1e-9)
    finals = {s.label: s.result.intervals["final_accuracy"].mean for s in series}
    assert finals["fedcs"] == finals["random"]  # what the old panel showed: nothing
    xs = [line.get_xdata()[0] for line in acc_delta.lines if len(line.get_xdata()) == 1]
    assert any(abs(x - 0.182) < 1e-6 for x in xs)
    assert acc_axis.get_xlim()[0] >= 0


def test_time_and_accuracy_axes_and_bands_stay_within_their_bounds(plan, monkeypatch, tmp_path):
    # round times with a large spread: a t band around their mean would reach below 0
    recs = [record("random", s, [0.1, 0.4, 0.6, 0.7, 0.8, 0.85], [0.1, 9.0, 0.1, 9.0, 0.1] if s % 2 else
                   [9.0, 0.1, 9.0, 0.1, 9.0]) for s in range(3)]
    recs += [record("fedcs", s, [0.1, 0.2, 0.99, 0.2, 0.99, 0.3], [0.2, 0.1, 8.0, 0.1, 0.3]) for s in range(3)]
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append((path.name, fig)) or path)
    plots.plot_all(recs, plan, tmp_path, compare(recs, plan))
    figs = dict(figures)
    for name, low, high in (("round_time.png", 0.0, None), ("accuracy_vs_round.png", 0.0, 1.0),
                            ("accuracy_vs_time.png", 0.0, 1.0)):
        for ax in figs[name].axes:
            if not ax.get_visible():
                continue
            assert ax.get_xlim()[0] == 0, name
            assert ax.get_ylim()[0] >= low, name
            if high is not None:
                assert ax.get_ylim()[1] <= high, name
            for band in ax.collections:  # fill_between's polygons
                ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
                assert ys.min() >= low - 1e-12 and (high is None or ys.max() <= high + 1e-12), name
