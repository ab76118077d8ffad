"""Norm clipping of the updates, then FedAvg (docs/SPEC.md §3.5; docs/AGGREGATORS.md, docs/ROBUSTNESS.md).

Z. Sun, P. Kairouz, A. T. Suresh, H. B. McMahan, "Can You Really Backdoor Federated Learning?",
arXiv:1911.07963, 2019 (§3 "norm thresholding of updates").

Each responder's update Δ_k = w_k − w_t is clipped to norm at most M before the weighted average:

    Δ'_k    = Δ_k · min(1, M / ‖Δ_k‖)
    w_{t+1} = w_t + Σ_k p_k Δ'_k,     p_k ∝ n_k (or uniform)

With an absolute ``max_norm`` M this is the paper's defence. Its M is a tuned constant of the model and
task; by default (``max_norm`` = ``None``) M is the median of the round's update norms ‖Δ_k‖, the suite's
choice (no tuning; at most half of the responders are clipped, and fewer than half cannot raise M past
an honest client's norm). An attacker then moves the model by at most p_k · M, however it scales its
update. The paper's optional Gaussian noise ("weak differential privacy") is not part of this backend.
A non-finite update stays non-finite (the round is reported as diverged, as with FedAvg).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from fedsel_env.sim.limits import as_real, is_choice, short

from .base import Aggregator, ClientUpdates
from .median import coordinate_median
from .registry import AGGREGATORS


@AGGREGATORS.register("norm_clipping")
class NormClipping(Aggregator):
    """FedAvg of the updates clipped to norm M (Sun et al., 2019).

    :param max_norm: M > 0, the largest update norm kept; default ``None``: the median of the round's update norms.
    :param weighting: ``"num_samples"`` (p_k ∝ n_k, the default, as FedAvg) or ``"uniform"``.
    """

    name = "norm_clipping"

    def __init__(self, max_norm: Optional[float] = None, weighting: str = "num_samples") -> None:
        m = None if max_norm is None else as_real(max_norm)
        if max_norm is not None and (m is None or not math.isfinite(m) or not m > 0):
            raise ValueError(f"norm_clipping parameter 'max_norm' = {short(max_norm)}; allowed: a finite number > 0, "
                             f"or null (the median of each round's update norms)")
        if not is_choice(weighting, ("num_samples", "uniform")):
            raise ValueError(f"norm_clipping parameter 'weighting' = {short(weighting)}; allowed: 'num_samples', "
                             f"'uniform'")
        self.max_norm = m
        self.weighting = weighting
        self.last_bound: Optional[float] = None  # M of the last round

    def reset(self, global_params: torch.Tensor) -> None:
        """Clear the last round's diagnostic."""
        self.last_bound = None

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        w_t = updates.global_params
        delta = updates.local_params - w_t.unsqueeze(0)
        norms = torch.linalg.vector_norm(delta.to(torch.float64), dim=1)
        bound = float(coordinate_median(norms[:, None])[0]) if self.max_norm is None else self.max_norm
        self.last_bound = bound
        # min(1, M/‖Δ‖); a zero update stays zero (no 0/0), an infinite one gives 0·inf = NaN (diverged)
        factor = torch.where(norms > bound, bound / norms, torch.ones_like(norms))
        clipped = delta * factor.to(delta.dtype).unsqueeze(1)
        p = updates.num_samples if self.weighting == "num_samples" else torch.ones_like(updates.num_samples)
        p = p.to(delta.dtype)
        return w_t + (p / p.sum()) @ clipped
