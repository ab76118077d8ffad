"""RBCS-F: reputation-based client selection with a fairness guarantee (``rbcsf``).

T. Huang, W. Lin, W. Wu, L. He, K. Li, A. Y. Zomaya, "An Efficiency-boosting
Client Selection Scheme for Federated Learning with Fairness Guarantee", IEEE
Transactions on Parallel and Distributed Systems 32(7), 2021 (seed 004).
docs/SPEC.md §3.6 (the system model) and §4 (the agent).

The exchange time of client n in round t is linear in a context the server sees
before it selects (the C²MAB model, eq. 14):

    τ_{t,n} = c_{t,n}ᵀ θ*_n + ε_{t,n},   c_{t,n} = [1/μ_{t,n}, s_{t,n}, M/B_{t,n}].

Algorithm 2 keeps, per client, a ridge regression and a virtual queue:

    H_n ← λI,  b_n ← 0,  Z_n ← 0                                   (line 2)
    θ̂_{t,n} = H_{t−1,n}⁻¹ b_{t−1,n}                               (line 7)
    τ̄_{t,n} = c_{t,n}ᵀθ̂_{t,n} − α_t √(c_{t,n}ᵀ H_{t−1,n}⁻¹ c_{t,n})  (lines 8–9, a lower confidence bound)
    x_t = Algorithm 1(τ̄_t, m, I_t, Z_t)                            (line 11)
    Z_{t+1,n} = max(Z_{t,n} + β − x_{t,n}, 0)                       (eq. 6, line 14)
    H_{t,n} = H_{t−1,n} + x_{t,n} c cᵀ,  b_{t,n} = b_{t−1,n} + x_{t,n} τ_{t,n} c   (lines 15–16)

and Algorithm 1 solves the per-round problem P4 (eq. 21)

    min_x  V · max_n x_n τ̄_n − Σ_n Z_n x_n   s.t.  Σ x = min(m, Σ I),  x ≤ I,  x ∈ {0, 1}

exactly, by divide and conquer over the slowest admitted client: for every
available n_max, the best set whose slowest member is no slower than n_max is the
min(m, ΣI) clients of largest Z among those with τ̄ ≤ τ̄_{n_max}; the answer is the
best of these. (The optimum S* has a slowest member n*; the candidate built for
n* has a queue sum at least Σ_{S*} Z and a max τ̄ at most τ̄_{n*}, so it is no
worse.)

Feedback arrives as it would at a real server: the agent remembers the contexts
it saw when it selected, and the next observation carries ``last_exchange_time``
for the clients with ``responded_last_round`` = 1, which update their regressions.

Defaults follow the public re-implementation of the paper's simulation (40
clients, m = 8): λ = 1, α_t = 0.1 for every t, β = 0.15 — i.e. β·N/m = 0.75 of the
selection capacity reserved for the guarantee, the ratio kept here when β is not
given — and V ∈ {5, 10, 20, 50} in its sweep, of which 10 is the default here.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Union

import numpy as np

from fedsel_env.spec import CONTEXT_FEATURES, SelectionSpec

from .base import SelectionAgent
from .registry import AGENTS

#: β·N/m of the re-implementation (β = 0.15, N = 40, m = 8): the share of the selection capacity the guarantee uses.
DEFAULT_GUARANTEE_SHARE = 0.75


def p4_objective(chosen: np.ndarray, tau_bar: np.ndarray, queues: np.ndarray, v: float) -> float:
    """The objective of P4 (eq. 21) for the set ``chosen``: V · max τ̄ − Σ Z.

    :param chosen: indices of the selected clients (non-empty).
    :param tau_bar: estimated exchange times τ̄ of all N clients.
    :param queues: virtual-queue lengths Z of all N clients.
    :param v: the trade-off V.
    """
    chosen = np.asarray(chosen, dtype=np.int64)
    if chosen.size == 0:
        return 0.0
    return float(v * np.max(tau_bar[chosen]) - np.sum(queues[chosen]))


def divide_and_conquer(tau_bar: np.ndarray, queues: np.ndarray, available: np.ndarray, m: int,
                       v: float) -> np.ndarray:
    """Algorithm 1 of RBCS-F: an exact solution of P4 for one round.

    Ties: clients of equal Z keep their index order (a stable sort), thresholds are
    tried from the fastest up and the first minimum wins, so the answer is
    deterministic; any optimal set has the same objective value.

    :param tau_bar: τ̄_{t,n}, shape (N,).
    :param queues: Z_{t,n} ≥ 0, shape (N,).
    :param available: I_{t,n}, a boolean mask of shape (N,).
    :param m: the number of clients wanted; ``min(m, ΣI)`` are selected.
    :param v: the trade-off V ≥ 0 between round time and queue backlog.
    :return: the selected indices, ordered by decreasing Z.
    """
    tau_bar = np.asarray(tau_bar, dtype=np.float64)
    queues = np.asarray(queues, dtype=np.float64)
    available = np.asarray(available, dtype=bool)
    if not (tau_bar.shape == queues.shape == available.shape and tau_bar.ndim == 1):
        raise ValueError(f"tau_bar, queues and available must be 1-D of one length; got shapes "
                         f"{tau_bar.shape}, {queues.shape}, {available.shape}")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
        raise ValueError(f"m must be an integer >= 0, got {m!r}")
    avail = np.flatnonzero(available)
    k = min(int(m), avail.size)
    if k == 0:
        return np.empty(0, dtype=np.int64)
    # A_t: the available arms by decreasing queue length (line 2)
    by_queue = avail[np.argsort(-queues[avail], kind="stable")]
    best, best_value = None, np.inf
    for threshold in np.unique(tau_bar[avail]):  # one sub-problem P4-SUB per distinct τ̄_{n_max} (line 5)
        admitted = by_queue[tau_bar[by_queue] <= threshold][:k]  # lines 7–14
        if admitted.size < k:
            continue
        value = p4_objective(admitted, tau_bar, queues, v)
        if value < best_value:
            best, best_value = admitted, value
    return best  # the largest threshold admits every available arm, so best is set


def update_queues(queues: np.ndarray, selected: np.ndarray, beta: float) -> np.ndarray:
    """Eq. (6): Z_{t+1,n} = max(Z_{t,n} + β − x_{t,n}, 0).

    :param queues: Z_t, shape (N,).
    :param selected: indices with x_{t,n} = 1.
    :param beta: the guaranteed selection rate β.
    """
    x = np.zeros_like(queues, dtype=np.float64)
    x[np.asarray(selected, dtype=np.int64)] = 1.0
    return np.maximum(queues + beta - x, 0.0)


class ContextRidge:
    """Per-client ridge regressions of the exchange time on the context (Algorithm 2, lines 2, 7–9, 15–16).

    :param num_clients: N.
    :param lam: the ridge constant λ > 0.
    :param dim: the context's length (3).
    """

    def __init__(self, num_clients: int, lam: float, dim: int = 3) -> None:
        self.lam = float(lam)
        self.h = np.tile(self.lam * np.eye(dim), (num_clients, 1, 1))  # H_n
        self.b = np.zeros((num_clients, dim))                           # b_n
        self.count = np.zeros(num_clients, dtype=np.int64)             # observations per client

    def theta(self) -> np.ndarray:
        """θ̂_n = H_n⁻¹ b_n for every client, shape (N, dim)."""
        return np.linalg.solve(self.h, self.b[..., None])[..., 0]

    def estimate(self, contexts: np.ndarray, alpha: float = 0.0) -> np.ndarray:
        """cᵀθ̂ − α √(cᵀH⁻¹c) for every client's context (α = 0 gives the plain estimate).

        :param contexts: c_{t,n}, shape (N, dim).
        :param alpha: the exploration weight α_t.
        """
        h_inv_c = np.linalg.solve(self.h, contexts[..., None])[..., 0]
        width = np.sqrt(np.maximum(np.einsum("nd,nd->n", contexts, h_inv_c), 0.0))
        return np.einsum("nd,nd->n", contexts, self.theta()) - alpha * width

    def update(self, clients: np.ndarray, contexts: np.ndarray, times: np.ndarray) -> None:
        """H_n += c cᵀ, b_n += τ c for the listed clients (their contexts and observed times)."""
        clients = np.asarray(clients, dtype=np.int64)
        c = np.asarray(contexts, dtype=np.float64)
        self.h[clients] += np.einsum("nd,ne->nde", c, c)
        self.b[clients] += np.asarray(times, dtype=np.float64)[:, None] * c
        self.count[clients] += 1

    def observe(self, spec: SelectionSpec, obs: Dict[str, np.ndarray], contexts: Optional[np.ndarray]) -> None:
        """Fold in the exchange times ``obs`` reports for the last decision (lines 15–16).

        :param contexts: the contexts the agent saw when it made that decision (``None``: no decision yet).
        """
        if contexts is None:
            return
        responded = np.flatnonzero(spec.feature(obs, "responded_last_round") > 0.5)
        if responded.size:
            self.update(responded, contexts[responded], spec.feature(obs, "last_exchange_time")[responded])


def read_contexts(spec: SelectionSpec, obs: Dict[str, np.ndarray]) -> np.ndarray:
    """The coming round's contexts c_{t,n} from an observation, shape (N, 3)."""
    return np.stack([spec.feature(obs, name) for name in CONTEXT_FEATURES], axis=1).astype(np.float64)


def _number(name: str, value, lo: float, lo_open: bool = False) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    ok = ok and np.isfinite(value) and (value > lo if lo_open else value >= lo)
    if not ok:
        raise ValueError(f"parameter {name!r} = {value!r} is invalid: expected a finite number "
                         f"{'>' if lo_open else '>='} {lo}")
    return float(value)


@AGENTS.register("rbcsf")
class RBCSFAgent(SelectionAgent):
    """RBCS-F (Algorithm 2): LCB exchange-time estimates, virtual queues, Algorithm 1 each round.

    :param spec: the problem's public description.
    :param seed: unused (RBCS-F is deterministic); accepted for a uniform interface.
    :param beta: the guaranteed selection rate β; ``None`` = 0.75·m/N (the re-implementation's share).
        β·N must not exceed m, or no policy can meet the guarantee.
    :param v: the trade-off V ≥ 0 (larger: shorter rounds, longer queues).
    :param lam: the ridge constant λ > 0.
    :param alpha: the exploration weight α_t: a number (constant in t) or a callable ``t -> α_t`` (t = 1, 2, …).
    """

    name = "rbcsf"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None, beta: Optional[float] = None,
                 v: float = 10.0, lam: float = 1.0,
                 alpha: Union[float, Callable[[int], float]] = 0.1) -> None:
        super().__init__(spec, seed)
        m, n = self.k, spec.num_clients
        if beta is None:
            beta = DEFAULT_GUARANTEE_SHARE * m / n
        beta = _number("beta", beta, 0.0)
        if beta > 1.0 or beta * n > m + 1e-12:
            raise ValueError(f"parameter 'beta' = {beta!r} is infeasible: need 0 <= beta <= 1 and beta*N <= m "
                             f"(N = {n}, m = {m}, so beta <= {m / n:.4g})")
        self.beta = beta
        self.v = _number("v", v, 0.0)
        self.lam = _number("lam", lam, 0.0, lo_open=True)
        if callable(alpha):
            self._alpha: Callable[[int], float] = alpha
        else:
            a = _number("alpha", alpha, 0.0)
            self._alpha = lambda t: a
        self._clear()

    def _clear(self) -> None:
        n = self.spec.num_clients
        self.ridge = ContextRidge(n, self.lam)
        self.queues = np.zeros(n)
        self.round = 0                       # t of the last decision
        self._pending_contexts: Optional[np.ndarray] = None

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        """Algorithm 2, lines 1–3: H = λI, b = 0, Z = 0 for every client."""
        self._clear()

    def theta_hat(self) -> np.ndarray:
        """The current ridge estimates θ̂_n, shape (N, 3)."""
        return self.ridge.theta()

    def estimated_times(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """τ̄_{t,n} for the coming round (lines 7–9), using α_t of the next decision."""
        return self.ridge.estimate(read_contexts(self.spec, obs), float(self._alpha(self.round + 1)))

    def observe_feedback(self, obs: Dict[str, np.ndarray]) -> None:
        """Lines 15–16 for the last decision: fold in the exchange times the observation reports."""
        self.ridge.observe(self.spec, obs, self._pending_contexts)
        self._pending_contexts = None

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        self.observe_feedback(obs)
        tau_bar = self.estimated_times(obs)
        available = self.spec.feature(obs, "available") > 0.5
        chosen = divide_and_conquer(tau_bar, self.queues, available, self.k, self.v)
        self.round += 1
        self.queues = update_queues(self.queues, chosen, self.beta)  # line 14: x_t is known now
        self._pending_contexts = read_contexts(self.spec, obs)
        return chosen
