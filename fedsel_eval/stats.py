"""Confidence intervals of an evaluation: bootstrap 95% CIs over seeds and paired differences against a reference.

Owns the statistics behind the tables and figures: :func:`bootstrap_ci` (the mean of a metric over
episodes with a percentile-bootstrap interval from ``scipy.stats.bootstrap``, seeded so that a
summary written twice is the same to the bit), :func:`paired_difference` (policy − reference, episode
by episode, paired by seed and backend: common random numbers make the pairs comparable), and the
convention for an episode that missed the target (:func:`to_target`): it counts as the cap — the round
budget, or the simulated time when it ended — which makes the mean a lower bound, and is marked
(``missed``). experiments/favor_study.py uses the same convention for its rounds to Ω.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

#: The confidence level of every interval the evaluation reports.
CONFIDENCE = 0.95
#: Bootstrap resamples per interval (scipy's default).
RESAMPLES = 9999
#: The bootstrap's generator seed: the same episodes give the same intervals on every summary.
BOOTSTRAP_SEED = 0

#: The to-target metrics and what a missed target counts as (the record's metric holding the cap).
TO_TARGET = {"rounds_to_target": "rounds budget", "time_to_target": "simulated time when the episode ended"}


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` values with its ``confidence`` interval [``lo``, ``hi``] (NaN when ``n`` < 2).

    :param missed: how many of the values are a missed target counted as the cap (a lower bound).
    """

    mean: float
    lo: float
    hi: float
    n: int
    missed: int = 0

    def text(self, spec: str, marker: str = "*") -> str:
        """``mean [lo, hi]`` in the number format ``spec`` (``+.1f`` signs them), ``marker`` appended when
        a missed target was counted; ``—`` without values, ``mean`` alone with one value."""
        if not math.isfinite(self.mean):
            return "—"
        mark = marker if self.missed else ""
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            return f"{self.mean:{spec}}{mark}"
        return f"{self.mean:{spec}} [{self.lo:{spec}}, {self.hi:{spec}}]{mark}"

    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly on one side of 0 (for a difference: a clear one)."""
        return (self.lo > 0 or self.hi < 0) if math.isfinite(self.lo) and math.isfinite(self.hi) else False

    def fields(self, prefix: str) -> Dict[str, float]:
        """The interval as CSV fields ``<prefix>_mean``, ``_lo``, ``_hi``, ``_n``, ``_missed``."""
        return {f"{prefix}_mean": self.mean, f"{prefix}_lo": self.lo, f"{prefix}_hi": self.hi,
                f"{prefix}_n": self.n, f"{prefix}_missed": self.missed}


def bootstrap_ci(values: Sequence[float], missed: int = 0, confidence: float = CONFIDENCE,
                 resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Interval:
    """The mean of ``values`` with its percentile-bootstrap confidence interval (``scipy.stats.bootstrap``).

    Non-finite values (a metric not measured) are left out. With fewer than two values there is no
    interval (``lo``/``hi`` NaN); equal values give the interval [v, v].

    :param missed: how many values are a missed target counted as the cap (carried into the result).
    :param seed: the bootstrap generator's seed (fixed, so the interval is reproducible).
    """
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0, missed)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, math.nan, math.nan, 1, missed)
    if np.all(x == x[0]):  # every resample is the same: scipy would warn about a degenerate distribution
        return Interval(mean, mean, mean, int(x.size), missed)
    from scipy import stats

    res = stats.bootstrap((x,), np.mean, n_resamples=resamples, confidence_level=confidence,
                          method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return Interval(mean, float(res.confidence_interval.low), float(res.confidence_interval.high), int(x.size),
                    missed)


def to_target(record: Mapping[str, Any], metric: str, cap: float) -> Tuple[float, bool]:
    """An episode's rounds or time to Ω, and whether it missed Ω (then it counts as the cap).

    :param metric: ``rounds_to_target`` (a miss counts as ``cap``, the round budget) or ``time_to_target``
        (a miss counts as the simulated time when the episode ended, ``sim_time``).
    :return: (value, missed).
    """
    if metric not in TO_TARGET:
        raise ValueError(f"to_target: metric {metric!r} is not one of {sorted(TO_TARGET)}")
    m = record["metrics"]
    if record["reached"] and m.get(metric) is not None:
        return float(m[metric]), False
    if metric == "rounds_to_target":
        return float(cap), True
    end = m.get("sim_time")
    return (math.nan if end is None else float(end)), True


def episode_value(record: Mapping[str, Any], metric: str, cap: float) -> Tuple[float, bool]:
    """One episode's value of ``metric`` (to-target metrics by :func:`to_target`), and whether it is a miss."""
    if metric in TO_TARGET:
        return to_target(record, metric, cap)
    v = record["metrics"].get(metric)
    return (math.nan if v is None else float(v)), False


def metric_ci(records: Sequence[Mapping[str, Any]], metric: str, cap: float) -> Interval:
    """Mean of ``metric`` over ``records`` with its bootstrap CI (a missed target counted as the cap)."""
    pairs = [episode_value(r, metric, cap) for r in records]
    return bootstrap_ci([v for v, _ in pairs], missed=sum(m for _, m in pairs))


def paired_difference(records: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]],
                      metric: str, cap: float) -> Interval:
    """Mean of (policy − reference) over episodes paired by seed and backend, with a bootstrap CI.

    Only the (seed, backend) pairs both sides played are used (``n`` says how many). ``missed`` counts the
    pairs where either side missed Ω and was counted as the cap.

    :raises ValueError: when a side holds two episodes of one (seed, backend) (they cannot be paired).
    """
    mine, theirs = _by_episode(records), _by_episode(reference)
    keys = sorted(set(mine) & set(theirs))
    diffs, missed = [], 0
    for k in keys:
        (a, miss_a), (b, miss_b) = episode_value(mine[k], metric, cap), episode_value(theirs[k], metric, cap)
        diffs.append(a - b)
        missed += bool(miss_a or miss_b)
    return bootstrap_ci(diffs, missed=missed)


def _by_episode(records: Sequence[Mapping[str, Any]]) -> Dict[Tuple[int, str], Mapping[str, Any]]:
    out: Dict[Tuple[int, str], Mapping[str, Any]] = {}
    for r in records:
        k = (int(r["seed"]), str(r["backend"]))
        if k in out:
            raise ValueError(f"two episodes of policy {r['policy']!r} with seed {k[0]} and backend {k[1]!r}: "
                             f"a paired difference needs one per (seed, backend); pass one policy's records")
        out[k] = r
    return out


def t_band(curves: np.ndarray, confidence: float = CONFIDENCE,
           min_episodes: int = 2) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over axis 0 of ``curves`` (episodes × points, NaN = not running) with a Student-t band.

    :param min_episodes: the band is drawn where at least this many episodes (and at least two) have a value
        (with two, t = 12.7: the tail of a curve that only the longest episodes reach is mostly band).
    :return: (mean, lower, upper); the band is NaN where too few episodes have a value.
    """
    from scipy import stats

    n = np.sum(np.isfinite(curves), axis=0)
    with warnings.catch_warnings():  # a point where no (or one) episode runs: NaN, as documented
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(curves, axis=0)
        sd = np.nanstd(curves, axis=0, ddof=1)
    half = stats.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1)) * sd / np.sqrt(np.maximum(n, 1))
    half = np.where(n >= max(min_episodes, 2), half, np.nan)
    return mean, mean - half, mean + half


__all__ = ["BOOTSTRAP_SEED", "holm", "CONFIDENCE", "RESAMPLES", "TO_TARGET", "Interval", "bootstrap_ci", "episode_value",
           "metric_ci", "paired_difference", "t_band", "to_target"]


def holm(pvalues: Sequence[float]) -> List[float]:
    """Holm's step-down adjusted p-values (Holm, "A Simple Sequentially Rejective Multiple Test Procedure",
    Scand. J. Statistics 1979): sorted ascending, p_(i) × (m − i + 1), made monotone, capped at 1. A NaN p-value
    (a comparison that could not be tested) stays NaN and does not count in m.

    :param pvalues: the family's raw p-values, in any order; the result is in the same order.
    """
    p = [float(x) for x in pvalues]
    finite = sorted((v, i) for i, v in enumerate(p) if math.isfinite(v))
    m, out, running = len(finite), [math.nan] * len(p), 0.0
    for rank, (v, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * v))
        out[i] = running
    return out
