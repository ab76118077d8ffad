"""The server's view of a real federation, as the Dict observation fedsel agents were trained on (SPEC §2).

``FedSelectEnv`` builds its observation from the simulator; here the same three parts
are built from what Flower clients report and what the server itself sees:

- ``weights`` (N+1, d): FAVOR's state — the PCA of the global model (row 0) and of each
  client's latest local model. As in the env, the PCA is fitted once on the profiling
  round's N+1 weight vectors (every client trains one epoch from w_0) with d components
  and kept fixed; rows of clients that have not trained since keep their last value.
- ``clients`` (N, F), columns ``fedsel_env.spec.CLIENT_FEATURES``:
  ``loss``/``loss_rms`` — reported by the client (F_k(w_t) before local training);
  ``num_samples`` — reported n_k / max n; ``rounds_since_selected``,
  ``participation_rate``, ``selected_last_round``, ``responded_last_round`` and
  ``ctx_cold`` — the server's own records; ``available`` — the SuperNode is connected;
  ``last_exchange_time`` τ — the reply's creation time minus the instruction's (the
  server's measure of one model exchange: queueing, computation and transfer);
  ``ctx_cpu`` — the client's last local-computation seconds per sample and epoch over
  the median of all clients' (≈ 1/μ: 1 at the median speed, 2 when twice as slow);
  ``ctx_comm`` — the part of τ the client did not spend computing (τ − handle time,
  ≈ M/B). The simulator draws the contexts from RBCS-F's system model; a real server
  can only estimate them from the last exchange, which is what these are.
- ``progress`` (2,): rounds played / ``max_rounds`` and the last measured global accuracy.

Every part is clipped to the env's observation space for the same config (same bounds).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import numpy as np
from gymnasium import spaces

from fedsel_env.observation import LOSS_CAP, WeightPCA, dict_observation_space
from fedsel_env.spec import CLIENT_FEATURES, FEATURE_INDEX

def observation_space(cfg: Mapping[str, Any], num_clients: int, pca_components: int, model_size: int) -> spaces.Dict:
    """The env's Dict observation space for ``cfg`` (``fedsel_env.observation.dict_observation_space``)."""
    return dict_observation_space(cfg, num_clients, pca_components, model_size)


class ServerView:
    """Per-client records of a Flower server, turned into the env's Dict observation.

    :param cfg: the fedsel config.
    :param num_samples: n_k as the clients reported them, shape (N,).
    :param pca: the profiling round's :class:`WeightPCA`.
    :param global_row: PCA of w_0, (d,).
    :param client_rows: PCA of the profiling round's local models, (N, d).
    :param losses: F_k(w_0) reported in the profiling round, (N,).
    :param loss_rms: √mean squared loss, (N,).
    :param compute_per_sample: local-computation seconds per sample and epoch of the profiling round, (N,).
    :param exchange_times: τ of the profiling round, (N,).
    :param transfer_times: τ minus the client's handle time, (N,).
    :param model_size: P.
    :param accuracy: global accuracy of w_0 (0 when unknown).
    """

    def __init__(self, cfg: Mapping[str, Any], num_samples: np.ndarray, pca: WeightPCA, global_row: np.ndarray,
                 client_rows: np.ndarray, losses: np.ndarray, loss_rms: np.ndarray,
                 compute_per_sample: np.ndarray, exchange_times: np.ndarray, transfer_times: np.ndarray,
                 model_size: int, accuracy: float = 0.0) -> None:
        n = len(num_samples)
        self.n, self.budget = n, int(cfg["max_rounds"])
        self.num_samples = np.asarray(num_samples, dtype=np.int64)
        self.pca = pca
        d = pca.components.shape[0]
        self.space = observation_space(cfg, n, d, model_size)
        self.weights = np.zeros((n + 1, d))
        self.weights[0], self.weights[1:] = global_row, client_rows
        self.loss = np.asarray(losses, dtype=np.float64).copy()
        self.loss_rms = np.asarray(loss_rms, dtype=np.float64).copy()
        self.compute = np.asarray(compute_per_sample, dtype=np.float64).copy()
        self.last_tau = np.asarray(exchange_times, dtype=np.float64).copy()
        self.transfer = np.asarray(transfer_times, dtype=np.float64).copy()
        self.round = 0
        self.accuracy = float(accuracy)
        self.last_selected_round = np.zeros(n)  # the profiling round counts as round 0
        self.participation = np.zeros(n, dtype=np.int64)
        self.selected_last = np.zeros(n, dtype=bool)
        self.responded_last = np.zeros(n, dtype=bool)
        self.took_part_last = np.ones(n, dtype=bool)  # everyone took part in the profiling round

    def record_round(self, selected: np.ndarray, responders: np.ndarray, losses: np.ndarray, loss_rms: np.ndarray,
                     local_rows: Optional[np.ndarray], global_row: np.ndarray, exchange_times: np.ndarray,
                     compute_per_sample: np.ndarray, transfer_times: np.ndarray) -> None:
        """Fold one finished round into the records (arrays over the responders unless noted).

        :param selected: the clients the agent chose (indices).
        :param responders: the clients that replied.
        :param local_rows: PCA of the responders' local models (K', d), or None (gradients were sent).
        :param global_row: PCA of the new global model (d,).
        """
        self.round += 1
        resp = np.asarray(responders, dtype=np.int64)
        self.selected_last[:] = False
        self.selected_last[np.asarray(selected, dtype=np.int64)] = True
        self.responded_last[:] = False
        self.responded_last[resp] = True
        self.took_part_last = self.responded_last.copy()
        if resp.size:
            self.loss[resp] = losses
            self.loss_rms[resp] = loss_rms
            self.last_tau[resp] = exchange_times
            self.compute[resp] = compute_per_sample
            self.transfer[resp] = transfer_times
            self.participation[resp] += 1
            self.last_selected_round[resp] = self.round
            if local_rows is not None:
                self.weights[1 + resp] = local_rows
        self.weights[0] = global_row

    def observe(self, available: np.ndarray) -> Dict[str, np.ndarray]:
        """The Dict observation for the coming round; ``available`` (N,) bool: connected SuperNodes."""
        n, f = self.n, FEATURE_INDEX
        c = np.zeros((n, len(CLIENT_FEATURES)), dtype=np.float64)
        c[:, f["loss"]] = self.loss
        c[:, f["loss_rms"]] = self.loss_rms
        ns = self.num_samples.astype(np.float64)
        c[:, f["num_samples"]] = ns / ns.max()
        c[:, f["rounds_since_selected"]] = (self.round - self.last_selected_round) / self.budget
        c[:, f["participation_rate"]] = self.participation / max(self.round, 1)
        c[:, f["available"]] = np.asarray(available, dtype=np.float64)
        med = float(np.median(self.compute[self.compute > 0])) if np.any(self.compute > 0) else 0.0
        c[:, f["ctx_cpu"]] = self.compute / med if med > 0 else 1.0
        c[:, f["ctx_cold"]] = (~self.took_part_last).astype(np.float64)
        c[:, f["ctx_comm"]] = self.transfer
        c[:, f["last_exchange_time"]] = self.last_tau
        c[:, f["selected_last_round"]] = self.selected_last
        c[:, f["responded_last_round"]] = self.responded_last
        parts = {
            "weights": np.nan_to_num(self.weights, nan=0.0, posinf=1e6, neginf=-1e6),
            "clients": np.nan_to_num(c, nan=LOSS_CAP, posinf=LOSS_CAP),
            "progress": np.array([self.round / self.budget, self.accuracy]),
        }
        return {k: np.clip(v, self.space[k].low, self.space[k].high).astype(np.float32) for k, v in parts.items()}
