"""FedCS: the K available clients with the smallest estimated exchange time (``fedcs``).

T. Nishio, R. Yonetani, "Client Selection for Federated Learning with
Heterogeneous Resources in Mobile Edge", IEEE ICC 2019; in the form RBCS-F
(Huang et al., IEEE TPDS 2021, seed 004) compares against: a greedy choice of the
fastest clients, with no fairness term. docs/SPEC.md §4.

FedCS assumes the server can estimate each client's update-and-upload time from
the resource information it reports. Here a client reports its context
c_{t,n} = [1/μ, s, M/B] (docs/SPEC.md §3.6) and the server has seen the exchange times
τ of earlier rounds, so the estimate is learnt:

* ``estimator="ridge"`` (default): per client, ridge regression of τ on c — the
  same regression as RBCS-F's, without its exploration term:
  τ̂_{t,n} = c_{t,n}ᵀ H_n⁻¹ b_n, H_n = λI + Σ c cᵀ, b_n = Σ τ c over the rounds n
  responded in. It follows the context (a cold start, a busy CPU, a slow link)
  round by round.
* ``estimator="last"``: the last observed τ of the client.

Either way a client never observed is estimated at 0, so it is tried once
(optimism under uncertainty); equal estimates are broken at random. Selection:
the K available clients of smallest τ̂ (eq. 1's max τ is then as small as the
estimates allow).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .rbcsf import ContextRidge, _number, read_contexts
from .registry import AGENTS

ESTIMATORS = ("ridge", "last")


@AGENTS.register("fedcs")
class FedCSAgent(SelectionAgent):
    """Greedy: the K available clients with the smallest estimated exchange time.

    :param spec: the problem's public description.
    :param seed: seed of the tie-breaking generator.
    :param estimator: ``ridge`` (per-client regression on the context) or ``last`` (last observed τ).
    :param lam: the ridge constant λ > 0 (``ridge`` only; RBCS-F's default 1).
    """

    name = "fedcs"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None, estimator: str = "ridge",
                 lam: float = 1.0) -> None:
        super().__init__(spec, seed)
        if estimator not in ESTIMATORS:
            raise ValueError(f"parameter 'estimator' = {estimator!r} is invalid; allowed: {list(ESTIMATORS)}")
        self.estimator = estimator
        self.lam = _number("lam", lam, 0.0, lo_open=True)
        self._clear()

    def _clear(self) -> None:
        self.ridge = ContextRidge(self.spec.num_clients, self.lam)
        self._pending_contexts: Optional[np.ndarray] = None

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        self._clear()

    def estimated_times(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """τ̂_{t,n} for the coming round (0 for a client never observed)."""
        if self.estimator == "last":
            return self.spec.feature(obs, "last_exchange_time").astype(np.float64)
        return self.ridge.estimate(read_contexts(self.spec, obs))

    def observe_feedback(self, obs: Dict[str, np.ndarray]) -> None:
        """Fold the exchange times reported for the last decision into the regressions."""
        self.ridge.observe(self.spec, obs, self._pending_contexts)
        self._pending_contexts = None

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        self.observe_feedback(obs)
        estimate = self.estimated_times(obs)
        avail = self.available(obs)
        shuffled = self.rng.permutation(avail)  # random order first, so a stable sort breaks ties at random
        chosen = shuffled[np.argsort(estimate[shuffled], kind="stable")[: self.k]]
        self._pending_contexts = read_contexts(self.spec, obs)
        return chosen
