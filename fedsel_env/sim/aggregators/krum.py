"""Krum and Multi-Krum aggregation (docs/SPEC.md §3.5; docs/AGGREGATORS.md, docs/ROBUSTNESS.md).

P. Blanchard, E. M. El Mhamdi, R. Guerraoui, J. Stainer, "Machine Learning with Adversaries:
Byzantine Tolerant Gradient Descent", NeurIPS 2017 (§4 Krum, §5 Multi-Krum).

With K responders of which at most f are Byzantine (the paper's n and f; it needs K ≥ 2f + 3):

    s(k)    = Σ_{i ∈ N_k} ‖w_k − w_i‖²    N_k: the K − f − 2 responders closest to w_k (i ≠ k)
    Krum    : w_{t+1} = w_{k*},  k* = argmin_k s(k)            (ties: the lowest row)
    Multi-Krum: w_{t+1} = (1/m) Σ_{k ∈ M} w_k,  M = the m responders of lowest score

m = 1 is Krum; m = K − f is the paper's usual Multi-Krum. Distances between local models equal
distances between updates w_k − w_t. The clients are not weighted (as in the paper).

What happens when the round has fewer responders than the parameters need (drop-outs, unavailable
clients): the simulator cannot refuse a round, so f is lowered to the largest value that fits,
f_t = min(f, ⌊(K − 3)/2⌋), and m to min(m, K); with K ≤ 2 no responder can be told from a Byzantine one
and the responder whose update ‖w_k − w_t‖ is smallest is taken (the one that moves the model least).
``last_f`` and ``last_selected`` record what the last round used. A configuration whose
``clients_per_round`` is already too small for f (or m) is refused when the env or the Flower strategy is
built (:meth:`Krum.check_round_size`).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from fedsel_env.sim.limits import short

from .base import Aggregator, ClientUpdates
from .registry import AGGREGATORS


def largest_f(k: int) -> int:
    """The most Byzantine responders Krum tolerates among ``k``: ⌊(k − 3)/2⌋ (K ≥ 2f + 3), at least 0."""
    return max((k - 3) // 2, 0)


def krum_scores(values: torch.Tensor, f: int) -> torch.Tensor:
    """s(k) = the sum of the squared distances from row k to its K − f − 2 nearest other rows (float64).

    :param values: (K, P), K ≥ 3 and K ≥ 2f + 3.
    :param f: the number of Byzantine rows assumed.
    :return: (K,) float64; a row with non-finite values (or distances) scores +inf.
    """
    x = values.detach().to(torch.float64)
    k = x.shape[0]
    sq = (x * x).sum(dim=1)
    d2 = (sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)).clamp_min(0.0)  # ‖x_i − x_j‖²
    d2 = torch.where(torch.isfinite(d2), d2, torch.full_like(d2, float("inf")))
    d2.fill_diagonal_(float("inf"))  # i ≠ k
    nearest = d2.sort(dim=1).values[:, :k - f - 2]
    return nearest.sum(dim=1)


def _count(value: object, name: str, low: int, none_ok: bool) -> Optional[int]:
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < low:
        extra = " or null (the largest f each round's K allows, ⌊(K − 3)/2⌋)" if none_ok else ""
        raise ValueError(f"krum parameter {name!r} = {short(value)}; allowed: an integer ≥ {low}{extra}")
    return int(value)


@AGGREGATORS.register("krum")
class Krum(Aggregator):
    """Krum (m = 1) or Multi-Krum (m > 1) of the responders' weights (Blanchard et al., NeurIPS 2017).

    :param f: the number of Byzantine responders to tolerate, an integer ≥ 0; default ``None``: the most
        each round's K allows, ⌊(K − 3)/2⌋.
    :param m: how many of the lowest-scoring responders to average, an integer ≥ 1; default 1 (Krum).
    """

    name = "krum"

    def __init__(self, f: Optional[int] = None, m: int = 1) -> None:
        self.f = _count(f, "f", 0, none_ok=True)
        self.m = _count(m, "m", 1, none_ok=False)
        self.reset(torch.zeros(0))

    def reset(self, global_params: torch.Tensor) -> None:
        """Clear the last round's diagnostics."""
        self.last_f: Optional[int] = None
        self.last_selected: Optional[np.ndarray] = None  # rows of the responders averaged in the last round

    def check_round_size(self, k: int) -> None:
        """Refuse a ``clients_per_round`` K with which f or m cannot hold (K ≥ 2f + 3, m ≤ K).

        :raises ValueError: naming the parameter and the largest value K allows.
        """
        if self.f is not None and k < 2 * self.f + 3:
            raise ValueError(f"krum parameter 'f' = {short(self.f)} is too large for clients_per_round = {k}: Krum "
                             f"needs K ≥ 2f + 3, so f ≤ {largest_f(k)} here (or raise clients_per_round; f = null "
                             f"takes the largest f each round allows)")
        if self.m > k:
            raise ValueError(f"krum parameter 'm' = {short(self.m)} is larger than clients_per_round = {k}: "
                             f"Multi-Krum averages m of the K responders, so m ≤ {k}")

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        values = updates.local_params
        k = values.shape[0]
        if k <= 2:
            moved = torch.linalg.vector_norm((values - updates.global_params).to(torch.float64), dim=1)
            moved = torch.where(torch.isfinite(moved), moved, torch.full_like(moved, float("inf")))
            pick = int(torch.argmin(moved))
            self.last_f, self.last_selected = 0, np.array([pick])
            return values[pick].clone()
        f = largest_f(k) if self.f is None else min(self.f, largest_f(k))
        scores = krum_scores(values, f)
        m = min(self.m, k)
        order = torch.argsort(scores, stable=True)[:m]
        self.last_f, self.last_selected = f, np.sort(order.cpu().numpy())
        return values[order].mean(dim=0)
