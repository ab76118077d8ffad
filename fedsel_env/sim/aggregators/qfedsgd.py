"""q-FedSGD aggregation (docs/SPEC.md §3.5; seed 000, Algorithm 1).

T. Li, M. Sanjabi, A. Beirami, V. Smith,
"Fair Resource Allocation in Federated Learning", ICLR 2020.

Each responder k sends one full-batch gradient of its training loss at the global
model; the server takes the q-FFL step

    Δ_k = F_k^q ∇F_k(w_t)
    h_k = q F_k^{q−1} ‖∇F_k(w_t)‖² + L F_k^q
    w_{t+1} = w_t − Σ_k Δ_k / Σ_k h_k

with F_k = F_k(w_t). q = 0 gives w_{t+1} = w_t − (1/(K L)) Σ_k ∇F_k(w_t): one step of
gradient descent with rate 1/L on the clients' mean loss. The numerics (the 1e-10
offset on F_k, float64 scalars scaled by max F_k^q) are those of
:mod:`fedsel_env.sim.aggregators.qfedavg`.

The authors' code (litian96/fair_flearn, ``qffedsgd.py``) draws one minibatch per
round; docs/SPEC.md §3.5 and the paper's Algorithm 1 use the full-batch gradient, as here.
"""
from __future__ import annotations

from typing import Optional

import torch

from .base import Aggregator, ClientUpdates
from .qfedavg import check_real, q_fair_step
from .registry import AGGREGATORS


@AGGREGATORS.register("qfedsgd")
class QFedSGD(Aggregator):
    """q-FedSGD: the q-FFL step on the responders' full-batch gradients ∇F_k(w_t).

    :param q: fairness exponent, q ≥ 0; default 1.0.
    :param L: the Lipschitz constant L > 0 (the step is 1/L at q = 0); ``None`` (default)
        uses L = 1/η with η the env's learning rate (``updates.lr``).
    """

    name = "qfedsgd"
    client_update = "full_gradient"

    def __init__(self, q: float = 1.0, L: Optional[float] = None) -> None:
        self.q = check_real(self.name, "q", q, low=0.0)
        self.L = None if L is None else check_real(self.name, "L", L, low=0.0, low_open=True)

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        if updates.gradients is None:
            raise ValueError("qfedsgd needs ClientUpdates.gradients (its client_update is 'full_gradient'); got None")
        lip = self.L if self.L is not None else 1.0 / float(updates.lr)
        return q_fair_step(updates.global_params, updates.gradients, updates.losses_before, self.q, lip)
