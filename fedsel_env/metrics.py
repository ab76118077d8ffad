"""Accuracy and fairness metrics (docs/SPEC.md §5), shared by the env's ``info`` and evaluate.py."""
from __future__ import annotations

from typing import Dict

import numpy as np


def jain_index(x: np.ndarray) -> float:
    """Jain's fairness index (Σx)² / (n Σx²); 1 for equal shares, 1/n when one takes all (1.0 for all zeros)."""
    x = np.asarray(x, dtype=np.float64)
    s2 = float((x * x).sum())
    return 1.0 if s2 == 0 else float(x.sum() ** 2 / (x.size * s2))


def tail_means(acc: np.ndarray, frac: float = 0.1) -> tuple[float, float]:
    """Mean of the worst and of the best ``frac`` of the values (at least one value each)."""
    a = np.sort(np.asarray(acc, dtype=np.float64))
    m = max(1, int(round(frac * a.size)))
    return float(a[:m].mean()), float(a[-m:].mean())


def client_accuracy_summary(acc: np.ndarray) -> Dict[str, float]:
    """Per-client test accuracy: mean, std, variance (and ×10⁴ as q-FFL reports it), worst-10%, best-10%."""
    acc = np.asarray(acc, dtype=np.float64)
    worst, best = tail_means(acc)
    var = float(acc.var())
    return {"acc_mean": float(acc.mean()), "acc_std": float(acc.std()), "acc_var": var,
            "acc_var_1e4": var * 1e4, "acc_worst10": worst, "acc_best10": best}


def participation_summary(counts: np.ndarray, rounds: int) -> Dict[str, float]:
    """Jain's index of participation counts and the minimum participation rate (against RBCS-F's β)."""
    counts = np.asarray(counts, dtype=np.float64)
    return {"jain_index": jain_index(counts),
            "min_participation_rate": float(counts.min() / rounds) if rounds > 0 else 0.0}
