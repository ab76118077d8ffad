"""fedsel selectors in real federations: a Flower strategy, ClientApp and ServerApp (``pip install ".[flower]"``).

- :class:`FedSelectStrategy` (``fedsel_flower.strategy``): Flower's Message-API FedAvg whose
  clients are chosen by any fedsel agent (hand-written, or a trained FAVOR model) from the
  observation it was trained on, and whose results are aggregated by a fedsel backend.
- ``fedsel_flower.client_app``: the ClientApp (trains the fedsel model on its partition and
  reports F_k(w_t), n_k and its timings); ``app`` for ``flwr run``.
- ``fedsel_flower.server_app``: :func:`make_server_app` and ``app`` for ``flwr run``.
- the server's view of the clients is the env's own (``fedsel_env.server_view.ServerView``).

docs/FLOWER.md shows a simulation, a deployment on real SuperNodes, and the benchmark against
Flower's own simulation.
"""
from __future__ import annotations

try:
    import flwr  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the optional extra
    raise ImportError("fedsel_flower needs Flower: pip install \".[flower]\" (flwr[simulation])") from e

# Exports are imported on first use: a ClientApp process (a Ray actor, a SuperNode) then loads only
# what the client needs, not the agents and stable-baselines3 the server's strategy imports.
_EXPORTS = {
    "FedSelectStrategy": "strategy", "draw_initial_arrays": "server_app", "ContextEstimate": "contexts",
    "ClientTask": "task", "fedsel_config": "task", "federated_data": "task",
    "initial_arrays_for": "server_app", "make_server_app": "server_app", "make_client_app": "client_app",
    "ReplyLimits": "validation",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fedsel_flower' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
