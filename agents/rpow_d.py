"""Power-of-Choice with stale losses, π_rpow-d (``rpow_d``).

Y. J. Cho, J. Wang, G. Joshi, "Client Selection in Federated Learning: Convergence
Analysis and Power-of-Choice Selection Strategies", arXiv:2010.01243, 2020, §4: the
computation- and communication-efficient variant of π_pow-d (``agents/pow_d.py``).
Each round d candidates are drawn ∝ n_k as in π_pow-d, but they are ranked by the
loss each last reported (the ``loss`` feature: fresh for the clients that took part
in the last round, stale for the others, every client's after the profiling round),
so nobody is asked anything before the selection. docs/SPEC.md §4.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from .pow_d import PowerOfChoiceAgent
from .registry import AGENTS


@AGENTS.register("rpow_d")
class StalePowerOfChoiceAgent(PowerOfChoiceAgent):
    """π_rpow-d: d candidates ∝ n_k, keep the K with the highest last reported loss."""

    name = "rpow_d"

    def bind(self, env) -> None:
        """Asks nothing: needs no channel to the clients."""

    def candidate_losses(self, obs: Dict[str, np.ndarray], candidates: np.ndarray) -> np.ndarray:
        """The candidates' last reported losses (the observation's ``loss`` column)."""
        return self.spec.feature(obs, "loss")[candidates]
