"""FedSelect-Bench's leaderboard (``fedsel_eval/leaderboard.py``, issue #45): the figure's CI bars span the CIs, scores
beyond the axis are drawn at its edge with their numbers."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fedsel_eval import leaderboard  # plot_leaderboard was in fedsel_eval/leaderboard.py before issue #45

LIMIT = leaderboard.PLOT_LIMIT  # the axis: ±3

def _summary(scores):
    return {"scenario": "FreeRiders", "env_id": "fedsel/Bench-FreeRiders-v0", "objective": "rounds_to_target",
            "lower_is_better": True, "seeds": [0, 1], "low_headroom": False,
            "headroom": {"mean": 2.8, "lo": 0.9, "hi": 4.6, "n": 30, "missed": 0},
            "policies": {p: {"objective": {"mean": 20.0, "lo": 19.0, "hi": 21.0, "n": 30, "missed": 0},
                             "normalised": {"mean": m, "lo": lo, "hi": hi, "n": 30, "missed": 0},
                             "mean_wall_s": 0.2} for p, (m, lo, hi) in scores.items()}}


#: the issue's FreeRiders numbers: afl wholly beyond the left edge, pow_d(d=20)'s CI [-32.3, -6.7] too, qffl's
#: point beyond it with its CI reaching in, kcenter_cover's CI beyond the right edge, the rest inside
SCORES = {"afl": (-11.46, -32.30, -6.66), "kcenter_cover": (2.28, 1.44, 5.35), "qffl": (-3.67, -10.80, -1.97),
          "pow_d": (-0.43, -2.25, 0.14), "random": (0.0, 0.0, 0.0), "lookahead": (1.0, 1.0, 1.0)}


def _drawn(monkeypatch, tmp_path, scores):
    """Plot one panel and return its axes (the figure caught as it is saved)."""
    import matplotlib.figure

    caught = []
    save = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (caught.append(fig), save(fig, *a, **k)))
    leaderboard.plot_leaderboard([_summary(scores)], tmp_path / "leaderboard.png")
    assert (tmp_path / "leaderboard.png").stat().st_size > 0
    return caught[0].axes[0]


def _bars(ax):
    """Per y: the x extent covered by the horizontal line segments drawn there (the CI bars)."""
    out = {}
    for coll in ax.collections:
        for seg in coll.get_segments():
            (x0, y0), (x1, y1) = seg[0], seg[-1]
            if y0 == y1:
                lo, hi = out.get(round(y0), (math.inf, -math.inf))
                out[round(y0)] = (min(lo, x0, x1), max(hi, x0, x1))
    return out


def test_the_drawn_bar_spans_the_ci_cut_at_the_edges(monkeypatch, tmp_path):
    ax = _drawn(monkeypatch, tmp_path, SCORES)
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(names) == names and set(names) == set(SCORES)
    bars, lim = _bars(ax), LIMIT
    for y, name in enumerate(names):
        est, lo, hi = SCORES[name]
        left, right = max(lo, -lim), min(hi, lim)
        if left < right:  # some of the CI is on the axis: exactly that part is drawn
            assert bars[y] == pytest.approx((left, right)), name
        else:  # the CI lies wholly beyond an edge (or is a point): no bar
            assert y not in bars, name


def test_a_score_beyond_the_edge_is_drawn_there_with_its_numbers(monkeypatch, tmp_path):
    ax = _drawn(monkeypatch, tmp_path, SCORES)
    names = [t.get_text() for t in ax.get_yticklabels()]
    texts = {round(t.get_position()[1]): t.get_text() for t in ax.texts}
    markers = {}
    for line in ax.lines:
        x, y = line.get_xdata(), line.get_ydata()
        if len(x) == 1:
            markers.setdefault(round(float(y[0])), []).append((float(x[0]), line.get_marker()))
    for y, name in enumerate(names):
        est, lo, hi = SCORES[name]
        if abs(est) > LIMIT:
            edge = math.copysign(LIMIT, est)
            assert (edge, "<" if est < 0 else ">") in markers[y], name
            assert texts[y] == f"{est:+.1f} [{lo:+.1f}, {hi:+.1f}]", name
        else:
            assert (pytest.approx(est), "o") in markers[y] and y not in texts, name
    # a CI that goes on beyond an edge ends in an arrow there: kcenter_cover's on the right, qffl's on the left
    assert (LIMIT, ">") in markers[names.index("kcenter_cover")]


def test_ci_marks_on_small_cases():
    assert leaderboard.ci_marks(0.5, 0.2, 0.8) == {"bar": (0.2, 0.8), "cut_left": False, "cut_right": False,
                                             "point": 0.5, "off_axis": False}
    assert leaderboard.ci_marks(-11.46, -32.3, -6.66) == {"bar": None, "cut_left": False, "cut_right": False,
                                                    "point": -3.0, "off_axis": True}
    assert leaderboard.ci_marks(-3.67, -10.8, -1.97)["bar"] == (-3.0, -1.97)
    assert leaderboard.ci_marks(-3.67, -10.8, -1.97)["cut_left"]
    assert leaderboard.ci_marks(1.0, math.nan, math.nan)["bar"] is None  # one seed: no interval
