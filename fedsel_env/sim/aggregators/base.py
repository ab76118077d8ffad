"""The one interface every aggregation backend implements (docs/SPEC.md §3.5).

Weights travel flat: the global model is one vector of P floats, the K
responders' local models a (K, P) matrix, so every backend is a few lines of
tensor algebra (norms, weighted sums, a QP) with no knowledge of the network.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np
import torch


@dataclass
class ClientUpdates:
    """What the responding clients of one round give the server.

    :param global_params: w_t, shape (P,).
    :param local_params: w_k after local training, shape (K, P); ``None`` when the
        backend asked for gradients (``client_update == "full_gradient"``).
    :param gradients: ∇F_k(w_t), full-batch, shape (K, P); only when the backend asked for them.
    :param num_samples: n_k of each responder, shape (K,).
    :param losses_before: F_k(w_t), the mean training loss of the **global** model on
        client k's training data, measured before local training, shape (K,).
    :param client_ids: the responders' indices in 0..N-1, shape (K,).
    :param lr: the local learning rate η.
    :param round: the round index t (0-based).
    """

    global_params: torch.Tensor
    local_params: Optional[torch.Tensor]
    num_samples: torch.Tensor
    losses_before: torch.Tensor
    client_ids: np.ndarray
    lr: float
    round: int
    gradients: Optional[torch.Tensor] = None

    @property
    def num_clients(self) -> int:
        return int(self.num_samples.shape[0])


class Aggregator:
    """Base class of the aggregation backends.

    Subclasses set ``name`` (the registry name), validate their keyword
    parameters in ``__init__`` (``ValueError`` naming the parameter), and
    implement :meth:`aggregate`.

    :cvar client_update: ``"local_sgd"`` (clients run E epochs of local SGD and send
        their weights) or ``"full_gradient"`` (clients send one full-batch gradient, as q-FedSGD).
    """

    name: str = "aggregator"
    client_update: str = "local_sgd"

    def reset(self, global_params: torch.Tensor) -> None:
        """Start of an episode: clear any server state (e.g. a step-size schedule)."""

    def check_round_size(self, k: int) -> None:
        """Refuse, when the env or the Flower strategy is built, a ``clients_per_round`` K with which this
        backend's parameters cannot hold (e.g. Krum's K ≥ 2f + 3). Nothing to check by default.

        :raises ValueError: naming the parameter and what K allows.
        """

    def local_options(self) -> Dict[str, Any]:
        """Options the local objective must apply, e.g. ``{"prox_mu": 0.01}`` for FedProx."""
        return {}

    def aggregate(self, updates: ClientUpdates) -> torch.Tensor:
        """The next global weights w_{t+1}, shape (P,).

        Called only when at least one client responded.
        """
        raise NotImplementedError  # abstract

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def checked_aggregate(aggregator: Any, updates: ClientUpdates) -> torch.Tensor:
    """``aggregator.aggregate(updates)``, its result checked: a floating tensor of the global weights' shape,
    on their device (a plug-in aggregator's wrong answer would otherwise fail deep in torch).
    Non-finite values are not refused here: the round is then marked diverged, as for a built-in backend.

    :raises ValueError: naming the aggregator and what it returned.
    """
    out = aggregator.aggregate(updates)
    w = updates.global_params
    if not isinstance(out, torch.Tensor):
        problem = f"a {type(out).__name__}, not a torch.Tensor"
    elif out.shape != w.shape:
        problem = f"a tensor of shape {tuple(out.shape)}, not the global weights' {tuple(w.shape)}"
    elif not out.is_floating_point():
        problem = f"a tensor of dtype {out.dtype}, not a floating one like the global weights' {w.dtype}"
    elif out.device != w.device:
        problem = f"a tensor on {out.device}, not on the global weights' device {w.device}"
    else:
        return out
    raise ValueError(f"aggregator {type(aggregator).__module__}:{type(aggregator).__qualname__} returned "
                     f"{problem}: aggregate(updates) must return the next global weights, (P,)")
