"""The contexts a Flower server can estimate from its own clock: :class:`ContextEstimate`.

The simulator draws RBCS-F's contexts c_{t,n} from its system model (``fedsel_env/sim/system.py``); the
Flower strategy (``fedsel_flower/strategy.py``) stands this estimate in for them in the observation.
"""
from __future__ import annotations

import numpy as np


class ContextEstimate:
    """RBCS-F's contexts c_{t,n} as a real server can estimate them from each client's last exchange.

    The simulator draws the contexts from RBCS-F's system model; a Flower server only has its
    clock: ``ctx_cpu`` — the client's last local-computation seconds per sample and epoch over the
    median of all clients' (≈ 1/μ: 1 at the median speed, 2 when twice as slow); ``ctx_cold`` — 1
    when the client did not train in the last round; ``ctx_comm`` — the part of its last exchange
    time τ (the reply's creation time minus the instruction's) it did not spend computing (≈ M/B).

    :param compute: seconds per sample and epoch of the profiling round (N,).
    :param transfer: τ minus the client's handle time in the profiling round (N,).
    """

    def __init__(self, compute: np.ndarray, transfer: np.ndarray) -> None:
        self.compute = np.asarray(compute, dtype=np.float64).copy()
        self.transfer = np.asarray(transfer, dtype=np.float64).copy()
        self.took_part = np.ones(self.compute.size, dtype=bool)  # everyone trained in the profiling round

    def update(self, clients: np.ndarray, compute: np.ndarray, transfer: np.ndarray) -> None:
        """The clients that trained this round and their new timings."""
        self.took_part[:] = False
        self.took_part[clients] = True
        self.compute[clients], self.transfer[clients] = compute, transfer

    def context(self) -> np.ndarray:
        """(N, 3): [ctx_cpu, ctx_cold, ctx_comm]."""
        positive = self.compute > 0
        med = float(np.median(self.compute[positive])) if positive.any() else 0.0
        cpu = self.compute / med if med > 0 else np.ones_like(self.compute)
        return np.stack([cpu, (~self.took_part).astype(np.float64), self.transfer], axis=1)
