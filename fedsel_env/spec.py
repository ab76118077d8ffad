"""What a selection agent may know about the problem: :class:`SelectionSpec`.

Every field is something a real FL server knows before it selects anyone (the
number of clients, how many it may pick, the sample counts clients report, the
model size). Agents are built from a spec and read everything else from the
observation; they never see the simulator's hidden state (θ*, labels, data).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Tuple

import numpy as np

#: Columns of ``obs["clients"]`` (docs/SPEC.md §2), in order.
CLIENT_FEATURES: Tuple[str, ...] = (
    "loss",                   # last reported training loss F_k(w_t') of the global model on k (stale if not selected)
    "loss_rms",               # sqrt(mean of squared per-sample losses) at the same time (Oort's statistical utility)
    "num_samples",            # n_k / max_j n_j
    "rounds_since_selected",  # rounds since k last took part, / max_rounds (profiling round counts as round 0)
    "participation_rate",     # times k responded / rounds played so far (0 before the first round)
    "available",              # I_{t,n}: 1 if k is available in the coming round
    "ctx_cpu",                # c_{t,n}[0] = 1 / μ_{t,n}   (coming round)
    "ctx_cold",               # c_{t,n}[1] = s_{t,n}, 1 if k did not take part in the last round
    "ctx_comm",               # c_{t,n}[2] = M / B_{t,n}    (seconds)
    "last_exchange_time",     # τ observed the last time k responded (0 if never)
    "selected_last_round",    # 1 if k was selected in the last round
    "responded_last_round",   # 1 if k was selected and responded in the last round
)
FEATURE_INDEX = {name: i for i, name in enumerate(CLIENT_FEATURES)}
CONTEXT_FEATURES: Tuple[str, ...] = ("ctx_cpu", "ctx_cold", "ctx_comm")
#: Columns of ``obs["progress"]``.
PROGRESS_FEATURES: Tuple[str, ...] = ("round_fraction", "global_accuracy")


@dataclass(frozen=True)
class SelectionSpec:
    """The public description of one FedSelect problem, given to agents.

    :param num_clients: N.
    :param clients_per_round: K, the most clients selected per round.
    :param action_mode: ``one`` | ``topk`` | ``subset``.
    :param num_samples: training-sample count n_k of each client (as clients report it), shape (N,).
    :param max_rounds: the round budget of an episode.
    :param pca_components: d, the width of ``obs["weights"]``.
    :param model_bytes: M, the size of the model in bytes (parameters × 4).
    :param client_features: column names of ``obs["clients"]``.
    """

    num_clients: int
    clients_per_round: int
    action_mode: str
    num_samples: np.ndarray
    max_rounds: int
    pca_components: int
    model_bytes: int
    client_features: Tuple[str, ...] = CLIENT_FEATURES

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], num_samples: np.ndarray, model_size: int) -> "SelectionSpec":
        """The spec of a (complete, checked) env config, given what the profiling round told: the clients'
        sample counts and the model's parameter count. The env and the Flower strategy build theirs here."""
        return cls(num_clients=int(cfg["num_clients"]), clients_per_round=int(cfg["clients_per_round"]),
                   action_mode=cfg["action_mode"], num_samples=np.asarray(num_samples).copy(),
                   max_rounds=cfg["max_rounds"], pca_components=cls.pca_width(cfg), model_bytes=4 * int(model_size))

    @staticmethod
    def pca_width(cfg: Mapping[str, Any]) -> int:
        """d, the PCA width of a config: its ``pca_components``, by default min(100, N + 1); at most N + 1
        (the PCA is fitted on the N + 1 weight vectors of the profiling round)."""
        n = int(cfg["num_clients"])
        return min(cfg["pca_components"] or min(100, n + 1), n + 1)

    def feature(self, obs: dict, name: str) -> np.ndarray:
        """Column ``name`` of ``obs["clients"]``, shape (N,)."""
        return np.asarray(obs["clients"])[..., self.client_features.index(name)]
