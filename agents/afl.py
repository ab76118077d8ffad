"""Active Federated Learning with the loss valuation (``afl``).

J. Goetz, K. Malik, D. Bui, S. Moon, H. Liu, A. Kumar, "Active Federated
Learning", arXiv:1909.12641, 2019 (seed 001). docs/SPEC.md §4.

Each client holds a valuation of how useful training on it would be; AFL's loss
valuation is the global model's summed loss over the client's data, scaled by
1/√n_k:

    v_k = (1/√n_k) · Σ_{j ∈ D_k} l_j = √n_k · F_k,

F_k being the mean loss k reports. Valuations are refreshed only for the clients
that took part in a round (a client computes it when it trains); the others keep
their stale value:

    v_k^{(t+1)} = V(x_k, y_k; w^{(t)})  if k ∈ S_t,   v_k^{(t)}  otherwise.

Each round (the paper's Algorithm 1):

1. the ⌊α1·N⌋ clients with the lowest valuations get probability 0;
2. the others get p_k ∝ exp(α2 · v_k);
3. (1 − α3)·K clients are drawn from p without replacement;
4. α3·K clients are drawn uniformly from the clients not yet drawn.

α3·K is rounded to the nearest integer (halves up). Defaults α1 = 0.75,
α2 = 0.01, α3 = 0.1 are the paper's.

α2 relative to the valuations' spread (``alpha2_relative = c``, not in the paper): the paper's α2 = 0.01
is tied to its valuations' scale (hundreds of samples per user, an LSTM's losses); on a federation whose
valuations differ by a few units the softmax is flat and AFL draws its candidates uniformly. With ``c``
given, α2 is set once per episode, at ``reset``, to c / std(v⁰) — v⁰ the N valuations of the profiling
round (population std) — and then stays fixed as the paper's does: two clients one reset-std apart get
weights in the ratio e^c. If every reset valuation is equal (no spread to scale by; a std below 1e-9 of
the largest |v| counts as none), α2 = 0. In the env a drawn client must be
available: both draws are restricted to the available clients, and if fewer
available clients have p > 0 than step 3 needs, the rest of step 3 is drawn
uniformly too. The first observation after ``reset`` carries every client's loss
(the profiling round), which initialises every valuation.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .qffl import weighted_sample
from .registry import AGENTS


def _param(name: str, value, lo: float, hi: Optional[float], hi_open: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value >= lo
    ok = ok and (hi is None or (value < hi if hi_open else value <= hi))
    if not ok:
        upper = "" if hi is None else f" and {'<' if hi_open else '<='} {hi}"
        raise ValueError(f"parameter {name!r} = {value!r} is invalid: expected a number >= {lo}{upper}")
    return float(value)


@AGENTS.register("afl")
class AFLAgent(SelectionAgent):
    """AFL: softmax sampling over loss valuations, with the lowest α1·N excluded and α3·K uniform picks.

    :param spec: the problem's public description.
    :param seed: seed of the sampling generator.
    :param alpha1: the fraction of clients (lowest valuations) given probability 0, in [0, 1).
    :param alpha2: the softmax temperature on valuations (default 0.01, the paper's).
    :param alpha3: the fraction of the K picks drawn uniformly, in [0, 1].
    :param alpha2_relative: c >= 0 instead of ``alpha2``: α2 = c / std(v⁰), set at each ``reset`` from the
        profiling round's valuations (a client one reset-std above another gets e^c times its weight).
    :raises ValueError: for a parameter out of range, or both ``alpha2`` and ``alpha2_relative`` given.
    """

    name = "afl"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None, alpha1: float = 0.75,
                 alpha2: Optional[float] = None, alpha3: float = 0.1,
                 alpha2_relative: Optional[float] = None) -> None:
        super().__init__(spec, seed)
        if alpha2 is not None and alpha2_relative is not None:
            raise ValueError(f"parameters 'alpha2' = {alpha2!r} and 'alpha2_relative' = {alpha2_relative!r} are both "
                             f"given: give one (alpha2 fixes the temperature; alpha2_relative sets it at reset to "
                             f"alpha2_relative / std of the reset valuations)")
        self.alpha1 = _param("alpha1", alpha1, 0.0, 1.0, hi_open=True)
        self.alpha2 = _param("alpha2", 0.01 if alpha2 is None else alpha2, 0.0, None)
        self.alpha3 = _param("alpha3", alpha3, 0.0, 1.0)
        self.alpha2_relative = (None if alpha2_relative is None
                                else _param("alpha2_relative", alpha2_relative, 0.0, None))
        #: std(v⁰) of the last reset (None before one)
        self.reset_spread: Optional[float] = None
        self._sqrt_n = np.sqrt(spec.num_samples.astype(np.float64))
        self.valuations: Optional[np.ndarray] = None

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        """Every client reported its loss in the profiling round: v_k = √n_k · F_k for all k; with
        ``alpha2_relative``, α2 = alpha2_relative / std(v) (0 when every valuation is equal)."""
        self.valuations = self._sqrt_n * self.spec.feature(obs, "loss").astype(np.float64)
        self.reset_spread = float(np.std(self.valuations))
        if self.alpha2_relative is not None:
            # a spread at rounding level (equal valuations whose mean is inexact) counts as none
            spread = self.reset_spread > 1e-9 * float(np.max(np.abs(self.valuations), initial=0.0))
            self.alpha2 = self.alpha2_relative / self.reset_spread if spread else 0.0

    def refresh_valuations(self, obs: Dict[str, np.ndarray]) -> None:
        """v_k ← √n_k · F_k for the clients that took part in the last round only."""
        if self.valuations is None:
            self.reset(obs)
            return
        took_part = self.spec.feature(obs, "responded_last_round") > 0.5
        loss = self.spec.feature(obs, "loss").astype(np.float64)
        self.valuations[took_part] = self._sqrt_n[took_part] * loss[took_part]

    def probabilities(self) -> np.ndarray:
        """Steps 1–2: p over all N clients (0 for the ⌊α1·N⌋ lowest valuations, the rest ∝ exp(α2·v))."""
        if self.valuations is None:
            raise ValueError("AFL has no valuations yet: call reset(first_obs) or select(obs) first")
        v = self.valuations
        n_zero = int(np.floor(self.alpha1 * v.size))
        zero = np.argsort(v, kind="stable")[:n_zero]
        keep = np.ones(v.size, dtype=bool)
        keep[zero] = False
        logits = self.alpha2 * v
        p = np.zeros(v.size)
        p[keep] = np.exp(logits[keep] - logits[keep].max())  # minus the max: no overflow
        return p / p.sum()

    def num_uniform(self, k: int) -> int:
        """How many of k picks step 4 draws uniformly: α3·K rounded (halves up), at most k."""
        return min(int(np.floor(self.alpha3 * self.k + 0.5)), k)

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        self.refresh_valuations(obs)
        avail = self.available(obs)
        k = min(self.k, avail.size)
        n_uniform = self.num_uniform(k)
        p = self.probabilities()
        by_value = weighted_sample(self.rng, avail, p[avail], k - n_uniform)  # step 3
        rest = np.setdiff1d(avail, by_value)
        uniform = self.rng.choice(rest, size=n_uniform, replace=False)          # step 4
        return np.concatenate([by_value, uniform]).astype(np.int64)
