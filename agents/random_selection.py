"""Random selection: ``random`` (FedAvg's uniform sampling) and ``random_nk`` (q-FFL's n_k-proportional sampling).

McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017 (uniform); Li et al., "Fair Resource Allocation
in Federated Learning", ICLR 2020 (∝ n_k). docs/SPEC.md §4.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from .base import SelectionAgent
from .registry import AGENTS


@AGENTS.register("random")
class RandomAgent(SelectionAgent):
    """K clients drawn uniformly without replacement from the available ones."""

    name = "random"

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        avail = self.available(obs)
        return self.rng.choice(avail, size=min(self.k, avail.size), replace=False)


@AGENTS.register("random_nk")
class RandomNkAgent(SelectionAgent):
    """K available clients drawn without replacement with probability ∝ n_k."""

    name = "random_nk"

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        avail = self.available(obs)
        if avail.size == 0:
            return avail
        p = self.spec.num_samples[avail].astype(np.float64)
        return self.rng.choice(avail, size=min(self.k, avail.size), replace=False, p=p / p.sum())
