"""FedMGDA+ aggregation (docs/SPEC.md §3.5; seed 003, Algorithm 1).

Z. Hu, K. Shaloudegi, G. Zhang, Y. Yu,
"Federated Learning Meets Multi-objective Optimization",
IEEE Transactions on Network Science and Engineering 9(4), 2022 (arXiv:2006.11489).

Each responder's update is normalised, and the server moves along the min-norm
element of their convex hull near the prior weights λ0 — a direction along which no
participant's loss increases (for small steps and full-batch updates):

    g_i = w_t − w_i,   ḡ_i = g_i / (‖g_i‖ + 1e-8)          (a zero update gives ḡ_i = 0)
    λ   = argmin_λ ‖Σ_i λ_i ḡ_i‖²   s.t.  λ ∈ simplex,  ‖λ − λ0‖_∞ ≤ ε
    d_t = Σ_i λ_i ḡ_i,   w_{t+1} = w_t − η_t d_t,   η_t = η_0 · decay^⌊t / decay_every⌋

ε = 0 gives λ = λ0 (normalised FedAvg, "FedAvg-n"); ε = 1 leaves only the simplex
(plain FedMGDA). The QP in λ is K-dimensional: with G = ḡ ḡᵀ (K×K, float64) it is
min ½ λᵀGλ s.t. 1ᵀλ = 1, max(0, λ0 − ε) ≤ λ ≤ min(1, λ0 + ε), solved by the
``qpsolvers`` library (DAQP by default; Clarabel as fallback). The authors' code
(watml/Fed-MGDA, ``solve_centered_w``) bounds λ only by λ0 ± ε and so lets λ go negative
for ε > 1/K; SPEC and the paper keep λ on the simplex, as here.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import qpsolvers
import scipy.sparse as sp
import torch

from fedsel_env.sim.limits import is_choice, short

from .base import Aggregator, ClientUpdates
from .qfedavg import check_real
from .registry import AGGREGATORS

NORM_GUARD = 1e-8  # ḡ = g / (‖g‖ + 1e-8): no division by zero for a client that did not move
SOLVERS = ("daqp", "clarabel")
GRAM_CHUNK = 1 << 16  # columns per float64 block when forming the Gram matrix


def gram64(x: torch.Tensor) -> np.ndarray:
    """x xᵀ in float64 for x of shape (K, P), built in column blocks so no full float64 copy is held."""
    k, p = x.shape
    gram = torch.zeros(k, k, dtype=torch.float64, device=x.device)
    for start in range(0, p, GRAM_CHUNK):
        block = x[:, start:start + GRAM_CHUNK].to(torch.float64)
        gram += block @ block.T
    return gram.cpu().numpy()


def project_box_simplex(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``x`` onto {λ : Σλ = 1, lower ≤ λ ≤ upper} (assumed non-empty).

    The projection is clip(x − τ, lower, upper) with τ the root of the non-increasing,
    piecewise-linear s(τ) = Σ clip(x − τ, lower, upper) − 1; s is evaluated at all 2K
    breakpoints at once and τ interpolated on the segment where it changes sign. Used to
    remove a solver's round-off, so the result lies exactly on the feasible set.
    """
    breaks = np.sort(np.concatenate([x - lower, x - upper]))
    sums = np.clip(x[None, :] - breaks[:, None], lower, upper).sum(axis=1)  # non-increasing
    j = int(np.searchsorted(-sums, -1.0, side="right")) - 1  # last breakpoint with sum ≥ 1
    j = min(max(j, 0), len(breaks) - 2)
    s0, s1 = sums[j], sums[j + 1]
    tau = breaks[j] if s0 == s1 else breaks[j] + (s0 - 1.0) / (s0 - s1) * (breaks[j + 1] - breaks[j])
    return np.clip(x - tau, lower, upper)


@AGGREGATORS.register("fedmgda+")
class FedMGDAPlus(Aggregator):
    """FedMGDA+: a common descent direction of the normalised client updates.

    :param epsilon: ε ∈ [0, 1], the ∞-ball around λ0 (0 = normalised FedAvg, 1 = FedMGDA);
        default 1.0, the authors' code default and the value of all their FedMGDA+ runs.
    :param global_lr: η_0 > 0, the server step; default 1.0 (authors' ``options.py`` default, and
        their Figure 4 FedMGDA+ runs; their Figure 3 batch-10 run passes 1.5).
    :param decay: factor in (0, 1] applied to η every ``decay_every`` rounds; default 0.89, the
        value every FedMGDA+ run at batch 10 in the authors' scripts passes (watml/Fed-MGDA,
        ``main/Figure3`` and ``main/Figure4/shell_scripts_for_running_exps/batch_size10/
        fedmgdaplus_bs10.sh``: ``--global_lr_decay=0.89``, 2,000 rounds; their batch-400 runs
        pass 0.884 over 3,000 rounds). 1.0 turns the decay off (their ``options.py`` default).
    :param decay_every: rounds between decays, ≥ 1; default 100 (the paper's).
    :param weighting: λ0: ``"uniform"`` (default, as the paper's code) or ``"num_samples"`` (∝ n_k).
    :param solver: ``"daqp"`` (default; the faster at K = 10..100) or ``"clarabel"``; the other
        one is tried when the first fails, and λ0 (always feasible) when both fail.
    """

    name = "fedmgda+"

    def __init__(self, epsilon: float = 1.0, global_lr: float = 1.0, decay: float = 0.89,
                 decay_every: int = 100, weighting: str = "uniform", solver: str = "daqp") -> None:
        self.epsilon = check_real(self.name, "epsilon", epsilon, low=0.0, high=1.0)
        self.global_lr = check_real(self.name, "global_lr", global_lr, low=0.0, low_open=True)
        self.decay = check_real(self.name, "decay", decay, low=0.0, low_open=True, high=1.0)
        if isinstance(decay_every, bool) or not isinstance(decay_every, (int, np.integer)) or decay_every < 1:
            raise ValueError(f"fedmgda+ parameter 'decay_every' = {decay_every!r}; allowed: an integer ≥ 1")
        self.decay_every = int(decay_every)
        if not is_choice(weighting, ("uniform", "num_samples")):
            raise ValueError(f"fedmgda+ parameter 'weighting' = {short(weighting)}; allowed: 'uniform', 'num_samples'")
        self.weighting = weighting
        if not is_choice(solver, SOLVERS):
            raise ValueError(f"fedmgda+ parameter 'solver' = {short(solver)}; allowed: {', '.join(map(repr, SOLVERS))}")
        self.solver = solver
        self.reset(torch.zeros(0))

    def reset(self, global_params: torch.Tensor) -> None:
        """Clear the diagnostics of the last episode (the step schedule follows ``updates.round``)."""
        self.last_weights: Optional[np.ndarray] = None  # λ of the last round
        self.last_method: Optional[str] = None  # "daqp", "clarabel", "prior" (λ = λ0) or "single"
        self.solver_failures = 0  # rounds in which the chosen solver failed

    def step_size(self, round_index: int) -> float:
        """η_t = η_0 · decay^⌊t / decay_every⌋."""
        return self.global_lr * self.decay ** (int(round_index) // self.decay_every)

    def prior_weights(self, num_samples: torch.Tensor) -> np.ndarray:
        """λ0: uniform, or proportional to the responders' sample counts."""
        k = int(num_samples.shape[0])
        if self.weighting == "uniform":
            return np.full(k, 1.0 / k)
        n = num_samples.detach().cpu().numpy().astype(np.float64)
        return n / n.sum()

    def solve_weights(self, gram: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """λ = argmin λᵀ G λ over the simplex ∩ {‖λ − λ0‖∞ ≤ ε}, exactly feasible.

        :param gram: G = ḡ ḡᵀ, (K, K) float64.
        :param prior: λ0, (K,), on the simplex.
        """
        k = prior.shape[0]
        if k == 1:
            self.last_method = "single"
            return np.ones(1)
        if self.epsilon == 0.0:
            self.last_method = "prior"
            return prior.copy()
        lower = np.maximum(prior - self.epsilon, 0.0)
        upper = np.minimum(prior + self.epsilon, 1.0)
        order = (self.solver,) + tuple(s for s in SOLVERS if s != self.solver)
        for name in order:
            x = self._solve_qp(name, gram, lower, upper)
            if x is not None:
                self.last_method = name
                return project_box_simplex(x, lower, upper)
            if name == self.solver:
                self.solver_failures += 1
        # Both solvers failed (e.g. a Gram matrix with non-finite entries): λ0 is feasible
        # and gives normalised FedAvg, so the round still moves along a sane direction.
        self.last_method = "prior"
        return prior.copy()

    @staticmethod
    def _solve_qp(name: str, gram: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> Optional[np.ndarray]:
        """One solver's answer, or ``None`` when it fails or returns something non-finite."""
        k = gram.shape[0]
        sym = 0.5 * (gram + gram.T)
        ones = np.ones((1, k))
        if name == "clarabel":  # Clarabel takes sparse matrices; passing them avoids a conversion warning
            sym, ones = sp.csc_matrix(sym), sp.csc_matrix(ones)
        try:
            x = qpsolvers.solve_qp(sym, np.zeros(k), A=ones, b=np.ones(1), lb=lower, ub=upper, solver=name)
        except (qpsolvers.QPError, ValueError, ArithmeticError):
            return None
        if x is None or not np.all(np.isfinite(x)):
            return None
        return np.asarray(x, dtype=np.float64)

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        w = updates.global_params
        g = w.unsqueeze(0) - updates.local_params  # (K, P), g_i = w_t − w_i
        norms = torch.linalg.vector_norm(g, dim=1, dtype=torch.float64).cpu().numpy()
        inv = 1.0 / (norms + NORM_GUARD)  # ḡ_i = g_i · inv_i
        gram = gram64(g) * np.outer(inv, inv)
        lam = self.solve_weights(gram, self.prior_weights(updates.num_samples))
        self.last_weights = lam
        coef = torch.as_tensor(lam * inv * self.step_size(updates.round), dtype=g.dtype, device=g.device)
        return w - coef @ g
