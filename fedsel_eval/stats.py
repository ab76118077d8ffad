"""Confidence intervals of an evaluation: bootstrap 95% CIs over seeds and paired differences against a reference.

Owns the statistics behind the tables and figures: :func:`bootstrap_ci` (the mean of a metric over
episodes with a percentile-bootstrap interval from ``scipy.stats.bootstrap``, seeded so that a
summary written twice is the same to the bit), :func:`paired_difference` (policy − reference, episode
by episode, paired by seed and backend: common random numbers make the pairs comparable), the one
Student-t interval and test of the project (:func:`t_interval`, :func:`paired_t`: a :class:`TInterval`, the
mean with its interval and the two-sided p-value, for a handful of seeds where a bootstrap interval is too
narrow to mean anything; every script and ``fedsel_eval.records``' ``t_interval`` / ``paired_t`` /
``paired_t_across`` summaries stand on it, issue #46), Holm's correction (:func:`holm`), and the
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


@dataclass(frozen=True)
class TInterval(Interval):
    """A mean with its Student-t ``confidence`` interval [``lo``, ``hi``] and ``p``, the two-sided p-value of the
    one-sample t-test of mean 0 (for differences paired by seed: the paired t-test, ``scipy.stats.ttest_rel``).

    ``lo``/``hi`` are NaN below two values; equal values give [v, v] and ``p`` NaN (the test is undefined).
    :meth:`record` is the form a committed record stores.
    """

    p: float = math.nan

    def figures(self) -> Dict[str, Any]:
        """``{"mean", "lo", "hi", "n"}``, no interval as NaN (the studies' results.json form)."""
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n}

    def record(self) -> Dict[str, Any]:
        """:meth:`figures` with a non-finite figure as None (``fedsel_eval.records``' JSON form)."""
        return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in self.figures().items()}


def finite(values: Sequence[Any]) -> np.ndarray:
    """The finite values as float64 (None and NaN left out: a metric not measured)."""
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=np.float64)


def t_interval(values: Sequence[Any], confidence: float = CONFIDENCE) -> TInterval:
    """The mean of the finite ``values`` with its Student-t ``confidence`` interval (``scipy.stats.t.interval``
    over mean ± t·s/√n) and the two-sided p-value of mean 0 (``scipy.stats.ttest_1samp``).

    None and non-finite values are left out (``n`` counts the rest). No interval and no p below two values;
    equal values: the interval [mean, mean], p NaN.

    :raises ValueError: when ``confidence`` is not strictly between 0 and 1.
    """
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"t_interval: confidence {confidence!r} must lie strictly between 0 and 1 (e.g. 0.95)")
    x = finite(values)
    if x.size == 0:
        return TInterval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if x.size < 2:
        return TInterval(mean, math.nan, math.nan, 1)
    sem = float(x.std(ddof=1) / math.sqrt(x.size))
    if sem == 0.0 or np.all(x == x[0]):
        return TInterval(mean, mean, mean, int(x.size))
    from scipy import stats

    lo, hi = stats.t.interval(confidence, x.size - 1, loc=mean, scale=sem)
    p = float(stats.ttest_1samp(x, 0.0).pvalue)
    return TInterval(mean, float(lo), float(hi), int(x.size), p=p)


def paired_t(a: Sequence[Any], b: Sequence[Any], confidence: float = CONFIDENCE) -> TInterval:
    """The paired difference ``a − b`` (pair i: ``a[i] − b[i]``, one seed's two runs) as :func:`t_interval`: its
    mean, Student-t interval and the paired t-test's p-value (``scipy.stats.ttest_rel``). A pair with a missing
    (None / non-finite) side is left out.

    :raises ValueError: when ``a`` and ``b`` differ in length (they are not paired).
    """
    if len(a) != len(b):
        raise ValueError(f"paired_t: a has {len(a)} values and b {len(b)}: pass one value per seed on both sides, "
                         f"in the same seed order")
    diffs = [float(x) - float(y) for x, y in zip(a, b)
             if x is not None and y is not None and math.isfinite(float(x)) and math.isfinite(float(y))]
    return t_interval(diffs, confidence)


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


__all__ = ["BOOTSTRAP_SEED", "holm", "CONFIDENCE", "RESAMPLES", "TO_TARGET", "Interval", "TInterval", "bootstrap_ci",
           "episode_value", "finite", "metric_ci", "paired_difference", "paired_t", "t_band", "t_interval", "to_target"]


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
