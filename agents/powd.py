"""Power-of-Choice client selection, π_pow-d (``powd``).

Y. J. Cho, J. Wang, G. Joshi, "Client Selection in Federated Learning:
Convergence Analysis and Power-of-Choice Selection Strategies", arXiv:2010.01243,
2020 (AISTATS 2022 as "Towards Understanding Biased Client Selection in Federated
Learning"). SPEC §4.

Each round:

1. sample a candidate set A of d clients without replacement, P(k) ∝ p_k = n_k / Σ n;
2. the candidates report their local loss F_k(w_t) of the current global model;
3. select the K clients of A with the highest loss.

d spans the trade-off: d = K is unbiased sampling ∝ n_k, larger d biases towards
high-loss clients (faster convergence, a larger error floor). The paper's
experiments use d ∈ {2K, 3K, 5K} (Fashion-MNIST, K = 3: d = 6, 9, 15); the default
here is d = 2K, the smallest of them.

Step 2 in the env: the server knows the loss each client last reported (the
``loss`` feature, fresh for the clients that took part in the last round, stale
for the others, every client's after the profiling round), which stands in for
the candidates' report. Only available clients can be candidates. The K highest
losses are taken among the candidates — indexing the candidate set, not the list
of available clients (a published implementation sorts the wrong array).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from . import AGENTS
from .base import SelectionAgent
from .qffl import weighted_sample


@AGENTS.register("powd")
class PowerOfChoiceAgent(SelectionAgent):
    """π_pow-d: d candidates ∝ n_k, keep the K with the highest loss.

    :param spec: the problem's public description.
    :param seed: seed of the candidate sampling.
    :param d: the candidate-set size, K ≤ d ≤ N (``None`` = 2K, capped at N).
    """

    name = "powd"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None, d: Optional[int] = None) -> None:
        super().__init__(spec, seed)
        n = spec.num_clients
        if d is None:
            d = min(2 * self.k, n)
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not self.k <= d <= n:
            raise ValueError(f"parameter 'd' = {d!r} is invalid: expected an integer with K <= d <= N "
                             f"(K = {self.k}, N = {n})")
        self.d = int(d)
        self.last_candidates = np.empty(0, dtype=np.int64)

    def candidates(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """Step 1: d available clients drawn without replacement ∝ n_k (all of them if fewer are available)."""
        avail = self.available(obs)
        return weighted_sample(self.rng, avail, self.spec.num_samples[avail].astype(np.float64), self.d)

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        cand = self.candidates(obs)
        self.last_candidates = cand
        loss = self.spec.feature(obs, "loss")[cand]
        order = np.argsort(-loss, kind="stable")  # positions in the candidate set
        return cand[order[: self.k]]
