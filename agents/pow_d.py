"""Power-of-Choice client selection, π_pow-d (``pow_d``).

Y. J. Cho, J. Wang, G. Joshi, "Client Selection in Federated Learning:
Convergence Analysis and Power-of-Choice Selection Strategies", arXiv:2010.01243,
2020 (AISTATS 2022 as "Towards Understanding Biased Client Selection in Federated
Learning"). docs/SPEC.md §4.

Each round:

1. sample a candidate set A of d clients without replacement, P(k) ∝ p_k = n_k / Σ n;
2. the candidates report their local loss F_k(w_t) of the current global model;
3. select the K clients of A with the highest loss.

d spans the trade-off: d = K is unbiased sampling ∝ n_k, larger d biases towards
high-loss clients (faster convergence, a larger error floor). The paper's
experiments use d ∈ {2K, 3K, 5K} (Fashion-MNIST, K = 3: d = 6, 9, 15); the default
here is d = 2K, the smallest of them.

Step 2 is a real query: the candidates report F_k(w_t) on the **current** global
model through the env's ``query_losses`` (``FedSelectEnv.query_losses``), which
counts them (``info["loss_queries"]``) and in which attackers lie as they do in their
reports. The agent must be bound to its env first (``agent.bind(env.unwrapped)``;
``evaluate.py`` / ``fedsel_eval`` bind every agent). ``rpow_d`` (``agents/rpow_d.py``,
π_rpow-d) ranks by the last reported, possibly stale, losses instead and asks nothing.
Only available clients can be candidates. The K highest losses are taken among the
candidates — indexing the candidate set, not the list of available clients (a
published implementation sorts the wrong array).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .qffl import weighted_sample
from .registry import AGENTS


@AGENTS.register("pow_d")
class PowerOfChoiceAgent(SelectionAgent):
    """π_pow-d: d candidates ∝ n_k, keep the K with the highest loss.

    :param spec: the problem's public description.
    :param seed: seed of the candidate sampling.
    :param d: the candidate-set size, K ≤ d ≤ N (``None`` = 2K, capped at N).
    """

    name = "pow_d"
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
        self.query_losses: Optional[Callable[[np.ndarray], np.ndarray]] = None

    def bind(self, env: Any) -> None:
        """Step 2's channel: the env's ``query_losses`` (the candidates' F_k(w_t), counted as queries)."""
        self.query_losses = env.query_losses

    def candidate_losses(self, obs: Dict[str, np.ndarray], candidates: np.ndarray) -> np.ndarray:
        """Step 2: the candidates' losses on the current global model, asked of them."""
        if self.query_losses is None:
            raise ValueError("pow_d asks its d candidates for their loss on the current global model: bind it to "
                             "the env first (agent.bind(env.unwrapped); evaluate.py and fedsel_eval do), or use "
                             "rpow_d, which ranks by the last reported losses and asks nothing")
        return np.asarray(self.query_losses(candidates), dtype=np.float64)

    def candidates(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """Step 1: d available clients drawn without replacement ∝ n_k (all of them if fewer are available)."""
        avail = self.available(obs)
        return weighted_sample(self.rng, avail, self.spec.num_samples[avail].astype(np.float64), self.d)

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        cand = self.candidates(obs)
        self.last_candidates = cand
        loss = self.candidate_losses(obs, cand)
        order = np.argsort(-loss, kind="stable")  # positions in the candidate set
        return cand[order[: self.k]]
