"""System heterogeneity: RBCS-F's model of exchange times and availability (docs/SPEC.md §3.6).

T. Huang, W. Lin, W. Wu, L. He, K. Li, A. Y. Zomaya, "An Efficiency-boosting
Client Selection Scheme for Federated Learning with Fairness Guarantee",
IEEE TPDS 32(7), 2021 (seed 004).

Client n has hidden constants θ*_n = [τ^b_n, τ^s_n, 1/ln(1+SNR_n)] (training time
on one CPU, cold-start time, inverse spectral efficiency). In round t it exposes
the context c_{t,n} = [1/μ_{t,n}, s_{t,n}, M/B_{t,n}] (μ its available CPU share,
s = 1 when it did not take part in round t−1, M the model size in bytes, B its
bandwidth) and is available with probability p_n. Its model-exchange time is
τ_{t,n} = c_{t,n}ᵀθ*_n + ε_{t,n}, ε zero-mean Gaussian; the round lasts as long
as its slowest responder, and the simulated clock is the sum of rounds.

Every per-round draw (availability, CPU share, bandwidth, noise) is made for all N
clients from the system's own generator whatever the selection, so two policies
see the same system on the same seed (common random numbers).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np


class SystemModel:
    """The clients' hidden speeds, their per-round contexts, availability and exchange times.

    :param cfg: the config's ``system`` mapping.
    :param num_clients: N.
    :param model_bytes: M, bytes sent per model exchange.
    :param rng: generator for the hidden constants (they belong to the federation).
    :param draws: generator for every per-round draw (they belong to the episode); ``None``: ``rng``.
    """

    def __init__(self, cfg: Dict[str, Any], num_clients: int, model_bytes: int, rng: np.random.Generator,
                 draws: Optional[np.random.Generator] = None) -> None:
        self.n = num_clients
        self.model_bytes = float(model_bytes)
        classes = np.asarray(cfg["classes"], dtype=np.float64)
        # clients are spread evenly over the classes, in a random order
        self.client_class = rng.permutation(np.arange(num_clients) % len(classes))
        self.theta_star = classes[self.client_class]  # (N, 3), hidden from agents
        a = cfg["availability"]
        self.availability_p = np.broadcast_to(np.asarray(a, dtype=np.float64), (num_clients,)).copy()
        self.cpu_share = tuple(cfg["cpu_share"])
        self.bandwidth = tuple(cfg["bandwidth"])
        self.noise_std = float(cfg["noise_std"])
        self.rng = rng if draws is None else draws
        self.clock = 0.0
        self.took_part_last = np.zeros(num_clients, dtype=bool)
        self.context = np.zeros((num_clients, 3))
        self.available = np.ones(num_clients, dtype=bool)
        self._noise = np.zeros(num_clients)

    def draw_round(self) -> None:
        """Draw the coming round's availability, contexts and exchange-time noise for every client."""
        r = self.rng
        self.available = r.random(self.n) < self.availability_p
        mu = r.uniform(*self.cpu_share, size=self.n)
        bw = r.uniform(*self.bandwidth, size=self.n)
        cold = (~self.took_part_last).astype(np.float64)
        self.context = np.stack([1.0 / mu, cold, self.model_bytes / bw], axis=1)
        self._noise = r.normal(0.0, self.noise_std, size=self.n) if self.noise_std > 0 else np.zeros(self.n)

    def exchange_times(self, clients: np.ndarray) -> np.ndarray:
        """τ_{t,n} = c_{t,n}ᵀθ*_n + ε_{t,n} for the listed clients (floored at 0)."""
        clients = np.asarray(clients, dtype=np.int64)
        tau = np.einsum("ij,ij->i", self.context[clients], self.theta_star[clients]) + self._noise[clients]
        return np.maximum(tau, 0.0)

    def finish_round(self, responders: np.ndarray, round_time: Optional[float] = None,
                     took_part: Optional[np.ndarray] = None, share: float = 1.0) -> float:
        """Charge the round to the clock and record who took part; return the time charged.

        :param responders: the clients whose updates arrived.
        :param round_time: the round's length when the server decided it (a deadline, straggler
            delays: ``fedsel_env/sim/adversary.py``); ``None``: the slowest responder's exchange time.
        :param took_part: the clients that trained this round (warm next round); ``None``: the responders.
        :param share: the fraction of a communication round this exchange stands for (the ``one`` mode's
            ``one_mode_step``, ``fedsel_env/actions.py``'s ``server_step``): the clock is charged that share of
            its length, so K steps of 1/K cost about one deployed round, not K exchanges end to end (issue #45).
        """
        responders = np.asarray(responders, dtype=np.int64)
        if round_time is None:
            tau = self.exchange_times(responders)
            round_time = float(tau.max()) if tau.size else 0.0
        round_time = float(share) * float(round_time)  # share 1: the same float, bit for bit
        self.clock += round_time
        self.took_part_last = np.zeros(self.n, dtype=bool)
        self.took_part_last[responders if took_part is None else np.asarray(took_part, dtype=np.int64)] = True
        return float(round_time)
