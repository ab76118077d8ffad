"""Coordinate-wise trimmed-mean aggregation (docs/SPEC.md §3.5; docs/AGGREGATORS.md, docs/ROBUSTNESS.md).

D. Yin, Y. Chen, K. Ramchandran, P. Bartlett, "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates", ICML 2018 (Definition 2, Algorithm 1 "trimmed-mean-based").

For β ∈ [0, 1/2) and b = ⌊β K⌋, for every coordinate j: sort the K responders' values w_k[j],
remove the b largest and the b smallest, and average the K − 2b that remain:

    w_{t+1}[j] = 1/(K − 2b) Σ_{k ∈ U_j} w_k[j],   U_j = the middle K − 2b values of coordinate j

(the paper assumes β K is an integer; ⌊·⌋ is the usual rounding, so K − 2b ≥ 1 for every K ≥ 1).
β = 0 is the uniform mean. Up to b responders per coordinate, whatever they send, are removed; the
clients are not weighted (as in the paper). Default β = 0.2: b = 1 from K = 5 on (the suite's
choice; with β = 0.1, K = 5 would trim nothing).
"""
from __future__ import annotations

import math

import torch

from fedsel_env.sim.limits import real_in, short

from .base import Aggregator, ClientUpdates
from .registry import AGGREGATORS


def trimmed_count(beta: float, k: int) -> int:
    """b = ⌊β K⌋, the values removed at each end of every coordinate."""
    return int(math.floor(beta * k + 1e-12))


@AGGREGATORS.register("trimmed_mean")
class TrimmedMean(Aggregator):
    """Coordinate-wise β-trimmed mean of the responders' weights (Yin et al., ICML 2018).

    :param beta: the fraction β ∈ [0, 0.5) removed at each end of every coordinate; default 0.2.
    """

    name = "trimmed_mean"

    def __init__(self, beta: float = 0.2) -> None:
        b = real_in(beta, 0.0, 0.5, hi_open=True)
        if b is None:
            raise ValueError(f"trimmed_mean parameter 'beta' = {short(beta)}; allowed: a number in [0, 0.5) "
                             f"(the fraction of the responders removed at each end of every coordinate)")
        self.beta = b

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        values = updates.local_params
        k = values.shape[0]
        b = trimmed_count(self.beta, k)
        kept = values.sort(dim=0).values[b:k - b]
        return kept.mean(dim=0)
