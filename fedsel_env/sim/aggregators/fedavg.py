"""FedAvg aggregation (docs/SPEC.md §3.5).

H. B. McMahan, E. Moore, D. Ramage, S. Hampson, B. Agüera y Arcas,
"Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017.

w_{t+1} = Σ_k p_k w_k over the clients that reported, p_k ∝ n_k (or uniform).
"""
from __future__ import annotations

import torch

from fedsel_env.sim.limits import is_choice, short

from .base import Aggregator, ClientUpdates
from .registry import AGGREGATORS


def weighted_average(local_params: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_k p_k w_k with p = weights / Σ weights; ``local_params`` is (K, P)."""
    p = weights.to(local_params.dtype)
    p = p / p.sum()
    return p @ local_params


@AGGREGATORS.register("fedavg")
class FedAvg(Aggregator):
    """FedAvg: the n_k-weighted (or uniform) mean of the responders' weights.

    :param weighting: ``"num_samples"`` (p_k ∝ n_k, the default) or ``"uniform"``.
    """

    name = "fedavg"

    def __init__(self, weighting: str = "num_samples") -> None:
        if not is_choice(weighting, ("num_samples", "uniform")):
            raise ValueError(f"fedavg parameter 'weighting' = {short(weighting)}; allowed: 'num_samples', 'uniform'")
        self.weighting = weighting

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        w = updates.num_samples if self.weighting == "num_samples" else torch.ones_like(updates.num_samples)
        return weighted_average(updates.local_params, w)
