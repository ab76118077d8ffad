"""The heuristic q-FFL agent: sample clients with probability ∝ n_k · F_k^q (``qffl``).

T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated
Learning", ICLR 2020 (seed 000). docs/SPEC.md §4.

The q-FFL objective min_w Σ_k p_k/(q+1) · F_k^{q+1}(w) (p_k ∝ n_k) has gradient
Σ_k p_k F_k^q ∇F_k: device k weighs in proportion to n_k F_k^q. This agent turns
that weight into a sampling distribution over the available clients,

    P(k) ∝ n_k · F_k^q,

with F_k the last training loss k reported (stale for clients not selected since).
q = 0 is q-FFL's own n_k-proportional sampling (``random_nk``); larger q favours the
clients the model serves worst. Pair it with the ``qfedavg`` backend for the
paper's algorithm. This module also holds :func:`weighted_sample`, the sampling
without replacement the loss- and valuation-driven agents share.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .registry import AGENTS


def weighted_sample(rng: np.random.Generator, candidates: np.ndarray, weights: np.ndarray,
                    size: int) -> np.ndarray:
    """Draw ``size`` distinct candidates, one after another, each with probability ∝ its weight among those left.

    When fewer than ``size`` candidates have a positive weight, all of those are
    taken and the rest is drawn uniformly from the zero-weight ones.

    :param rng: the generator to draw from.
    :param candidates: the indices to draw from.
    :param weights: one finite weight ≥ 0 per candidate.
    :param size: how many to draw (capped at the number of candidates).
    :raises ValueError: for a negative or non-finite weight, or mismatched lengths.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != candidates.shape:
        raise ValueError(f"weights must match candidates in shape, got {w.shape} and {candidates.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and >= 0")
    size = min(int(size), candidates.size)
    if size <= 0:
        return np.empty(0, dtype=np.int64)
    positive = w > 0
    n_pos = int(positive.sum())
    if n_pos >= size:
        wp = w[positive]
        return rng.choice(candidates[positive], size=size, replace=False, p=wp / wp.sum())
    rest = rng.choice(candidates[~positive], size=size - n_pos, replace=False)
    return np.concatenate([rng.permutation(candidates[positive]), rest])


@AGENTS.register("qffl")
class QFFLAgent(SelectionAgent):
    """K available clients drawn without replacement with probability ∝ n_k · F_k^q.

    :param spec: the problem's public description.
    :param seed: seed of the sampling generator.
    :param q: the fairness exponent q ≥ 0 (q-FFL's q; 0 = ∝ n_k).
    """

    name = "qffl"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None, q: float = 1.0) -> None:
        super().__init__(spec, seed)
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not np.isfinite(q) or q < 0:
            raise ValueError(f"parameter 'q' = {q!r} is invalid: expected a finite number >= 0")
        self.q = float(q)

    def probabilities(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """P(k) ∝ n_k · F_k^q over the available clients (0 for the others), shape (N,)."""
        n = self.spec.num_samples.astype(np.float64)
        loss = np.maximum(self.spec.feature(obs, "loss").astype(np.float64), 0.0)
        avail = self.spec.feature(obs, "available") > 0.5
        # in logs, so that a large q cannot overflow: log w = log n + q log F
        with np.errstate(divide="ignore"):
            log_w = np.log(n) + (self.q * np.log(loss) if self.q > 0 else 0.0)
        log_w[~avail] = -np.inf
        p = np.zeros_like(n)
        finite = np.isfinite(log_w)
        if not finite.any():  # every available client reported a zero loss: no preference
            p[avail] = 1.0
        else:
            p[finite] = np.exp(log_w[finite] - log_w[finite].max())
        total = p.sum()
        return p / total if total > 0 else p

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        avail = self.available(obs)
        p = self.probabilities(obs)
        return weighted_sample(self.rng, avail, p[avail], self.k)
