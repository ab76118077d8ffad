"""FedProx (docs/SPEC.md §3.4, §3.5).

T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi, A. Talwalkar, V. Smith,
"Federated Optimization in Heterogeneous Networks", MLSys 2020.

Each responder k approximately minimises the proximal local objective

    h_k(w; w_t) = F_k(w) + (μ/2) ‖w − w_t‖²

(the local trainer adds the term when ``local_options()`` carries ``prox_mu``), and
the server aggregates as FedAvg: w_{t+1} = Σ_k p_k w_k, p_k ∝ n_k (or uniform).
μ = 0 is FedAvg.
"""
from __future__ import annotations

from typing import Any, Dict

from fedsel_env.sim.limits import is_choice, short

from .fedavg import FedAvg
from .qfedavg import check_real
from .registry import AGGREGATORS


@AGGREGATORS.register("fedprox")
class FedProx(FedAvg):
    """FedProx: FedAvg aggregation of local models trained with a proximal term.

    :param mu: proximal weight μ ≥ 0; default 0.01 (FedProx's grid is {0.001, 0.01, 0.1, 1};
        0.01 is the value FedMGDA+'s CIFAR-10 comparison settles on).
    :param weighting: ``"num_samples"`` (p_k ∝ n_k, the default) or ``"uniform"``.
    """

    name = "fedprox"

    def __init__(self, mu: float = 0.01, weighting: str = "num_samples") -> None:
        self.mu = check_real(self.name, "mu", mu, low=0.0)
        if not is_choice(weighting, ("num_samples", "uniform")):
            raise ValueError(f"fedprox parameter 'weighting' = {short(weighting)}; allowed: 'num_samples', 'uniform'")
        super().__init__(weighting)

    def local_options(self) -> Dict[str, Any]:
        """``{"prox_mu": μ}``: the local trainer adds (μ/2)‖w − w_t‖² to each client's loss."""
        return {"prox_mu": self.mu}
