"""Coordinate-wise median aggregation (docs/SPEC.md §3.5; docs/AGGREGATORS.md, docs/ROBUSTNESS.md).

D. Yin, Y. Chen, K. Ramchandran, P. Bartlett, "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates", ICML 2018 (Definition 1, Algorithm 1 "median-based").

    w_{t+1}[j] = med{ w_k[j] : k = 1..K }      for every coordinate j

the usual one-dimensional median of the K responders' values of coordinate j (for even K the mean
of the two middle values). As in the paper the clients are not weighted: a client that claims many
samples gains nothing, and fewer than half of the responders, whatever they send, cannot move a
coordinate outside the range of the honest clients' values. Taking the median of the local models
w_k or of the updates w_k − w_t is the same thing (the median commutes with the shift by w_t).
"""
from __future__ import annotations

import torch

from .base import Aggregator, ClientUpdates
from .registry import AGGREGATORS


def coordinate_median(values: torch.Tensor) -> torch.Tensor:
    """The median of each column of ``values`` (K, P); for even K the mean of the two middle values.

    A NaN sorts last (as a value above every number), so fewer NaN rows than half do not reach the result.
    """
    k = values.shape[0]
    ordered = values.sort(dim=0).values
    if k % 2:
        return ordered[k // 2].clone()
    return (ordered[k // 2 - 1] + ordered[k // 2]) / 2


@AGGREGATORS.register("median")
class CoordinateMedian(Aggregator):
    """Coordinate-wise median of the responders' weights (Yin et al., ICML 2018). No parameters."""

    name = "median"

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        return coordinate_median(updates.local_params)
