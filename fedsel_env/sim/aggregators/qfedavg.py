"""q-FedAvg aggregation (docs/SPEC.md §3.5; seed 000, Algorithm 2).

T. Li, M. Sanjabi, A. Beirami, V. Smith,
"Fair Resource Allocation in Federated Learning", ICLR 2020.

q-FedAvg minimises the q-fair objective f_q(w) = Σ_k p_k F_k^{q+1}(w) / (q+1). Each
responder k runs E epochs of local SGD from w_t to w̄_k, and the server takes one
step whose length comes from a Lipschitz estimate of f_q:

    F_k  = training loss of the global model w_t on client k (before local training)
    Δw_k = L (w_t − w̄_k)                       (L = 1/η: Δw_k stands in for ∇F_k(w_t))
    Δ_k  = F_k^q Δw_k
    h_k  = q F_k^{q−1} ‖Δw_k‖² + L F_k^q
    w_{t+1} = w_t − Σ_k Δ_k / Σ_k h_k

q = 0 gives h_k = L and w_{t+1} = (1/K) Σ_k w̄_k: uniform FedAvg.

Numerics. As in the authors' code (litian96/fair_flearn, ``flearn/trainers/qffedavg.py``:
``np.float_power(loss+1e-10, q)``), F_k is offset by ``LOSS_OFFSET`` = 1e-10, so a
client with zero loss gives a finite F_k^{q−1} for q < 1. The scalars are computed in
float64, and every F_k^q is divided by max_j F_j^q before use: the update is a ratio
of sums that are both linear in the F_k^q, so it is unchanged, while neither sum can
overflow or underflow for large q (Σ h_k ≥ L > 0 after the scaling). At q = 0 the
q F_k^{q−1} term is exactly 0.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from fedsel_env.sim.limits import real_in, reals_text, short

from .base import Aggregator, ClientUpdates
from .registry import AGGREGATORS

LOSS_OFFSET = 1e-10  # added to F_k, as in the q-FFL reference code


def check_real(aggregator: str, param: str, value: object, *, low: float, low_open: bool = False,
               high: float = math.inf) -> float:
    """``value`` as a float, or ``ValueError`` naming ``aggregator``'s ``param`` and its range.

    :param low: smallest allowed value (excluded when ``low_open``); a range from 0 (included) refuses -0.0.
    :param high: largest allowed value (included).
    """
    v = real_in(value, low, high, lo_open=low_open)
    if v is None:
        raise ValueError(f"{aggregator} parameter {param!r} = {short(value)}; allowed: "
                         f"{reals_text(low, high, lo_open=low_open, given=value)}")
    return v


def q_fair_step(global_params: torch.Tensor, directions: torch.Tensor, losses: torch.Tensor,
                q: float, lipschitz: float) -> torch.Tensor:
    """The q-FFL server step w_t − Σ_k F_k^q Δ_k / Σ_k h_k shared by q-FedAvg and q-FedSGD.

    :param global_params: w_t, shape (P,).
    :param directions: Δw_k = L (w_t − w̄_k) for q-FedAvg or ∇F_k(w_t) for q-FedSGD, shape (K, P).
    :param losses: F_k(w_t), shape (K,), non-negative.
    :param q: fairness exponent q ≥ 0.
    :param lipschitz: L > 0.
    :return: w_{t+1}, shape (P,), dtype of ``global_params``.
    """
    f = losses.detach().to(dtype=torch.float64, device=directions.device)
    if bool((f < 0).any()):
        raise ValueError(f"q-FFL needs non-negative losses F_k; got losses_before = {losses.tolist()}")
    f = f + LOSS_OFFSET
    log_f = torch.log(f)
    # F_k^q / max_j F_j^q, in (0, 1]: scaling numerator and denominator alike keeps the ratio.
    f_q = torch.exp(q * (log_f - log_f.max()))
    sq_norms = torch.linalg.vector_norm(directions, dim=1, dtype=torch.float64) ** 2
    curvature = q * (f_q / f) * sq_norms if q > 0 else torch.zeros_like(f_q)
    h_sum = (curvature + lipschitz * f_q).sum()
    if h_sum == 0:  # unreachable for finite inputs (Σ h ≥ L); kept so no 0/0 can ever arise
        return global_params.clone()
    coef = (f_q / h_sum).to(directions.dtype)
    return global_params - coef @ directions


@AGGREGATORS.register("qfedavg")
class QFedAvg(Aggregator):
    """q-FedAvg: the q-FFL step with Δw_k = L (w_t − w̄_k) from E epochs of local SGD.

    :param q: fairness exponent, q ≥ 0 (0 = uniform FedAvg); default 1.0.
    :param L: the Lipschitz constant L > 0; ``None`` (default) uses L = 1/η with η the
        local learning rate (``updates.lr``), as docs/SPEC.md §3.5 and the authors' code do.
    """

    name = "qfedavg"

    def __init__(self, q: float = 1.0, L: Optional[float] = None) -> None:
        self.q = check_real(self.name, "q", q, low=0.0)
        self.L = None if L is None else check_real(self.name, "L", L, low=0.0, low_open=True)

    def lipschitz(self, updates: ClientUpdates) -> float:
        """L, or 1/η when the parameter was left at ``None``."""
        return self.L if self.L is not None else 1.0 / float(updates.lr)

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        lip = self.lipschitz(updates)
        w = updates.global_params
        delta_w = lip * (w.unsqueeze(0) - updates.local_params)
        return q_fair_step(w, delta_w, updates.losses_before, self.q, lip)
