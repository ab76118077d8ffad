"""Checking a Flower client's reply before the server uses it (issue #30): a client is not trusted.

A reply carries the client's partition id, its number of examples, its losses and timings, and its
weights (or gradient). Without checks one client could take over the federation (``num_examples`` =
10^15 makes FedAvg's global model that client's weights), poison it (weights of 1e30, finite but
absurd), or stop it (a wrong shape, or another client's partition id, raised and ended the run).

:func:`check_train_reply` returns what is wrong with one reply, or ``None``: exactly one array record
and one metric record; the metrics present and finite (losses and times >= 0); the partition id the
node registered in the profiling round, and a node the server sent the task to; ``num_examples`` an
integer in [1, the size the client registered] (in the profiling round, in [1, ``max_num_examples``]);
the arrays' names, shapes and floating dtypes those of the model, every value finite; and the update's
norm ‖w_k − w_t‖ (or the gradient's) within :class:`ReplyLimits`' bound. :class:`FedSelectStrategy`
counts a reply that fails as a failed client of that round (``fedsel_flower/strategy.py``).

A reply that passes still weighs what it claims; :func:`capped_weights` holds any one client at
``ReplyLimits.max_weight_share`` (1/2) of a round's aggregation weight (issue #44: a client that registered
10^7 examples otherwise held ≈ all of FedAvg's weight). Robustness to a poisoned update within the bounds is the
backend's (``aggregator: median``, ``trimmed_mean``, ``krum``, ``norm_clipping``; docs/AGGREGATORS.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np
import torch

from fedsel_env.sim.limits import short
from fedsel_env.sim.training import ParamLayout

from .task import NUM_EXAMPLES_KEY, PARTITION_KEY, flat_of

#: The metrics every train reply carries (``client_app.train``), each a finite number >= 0.
TRAIN_METRICS = (NUM_EXAMPLES_KEY, PARTITION_KEY, "loss", "loss-rms", "train-time", "handle-time")


@dataclass(frozen=True)
class ReplyLimits:
    """What a reply may claim.

    :param max_num_examples: the most examples a client may register in the profiling round.
    :param max_update_ratio: a reply is refused when ‖update‖ > ratio · max(‖w_t‖, 1), with update
        w_k − w_t (or the gradient, for gradient backends); ``None``: no relative bound.
    :param max_update_norm: the same with an absolute bound on ‖update‖; ``None``: none.
    :param max_weight_share: the largest share of a round's aggregation weight any one client's
        ``num_examples`` buys (:func:`capped_weights`); default 1/2, so no client outweighs all the others
        of its round together; ``None``: no cap (FedAvg's p_k = n_k / Σ n exactly).
    """

    max_num_examples: int = 10_000_000
    max_update_ratio: Optional[float] = 100.0
    max_update_norm: Optional[float] = None
    max_weight_share: Optional[float] = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.max_num_examples, bool) or not isinstance(self.max_num_examples, int) \
                or self.max_num_examples < 1:
            raise ValueError(f"max_num_examples = {short(self.max_num_examples)} is invalid: expected an integer >= 1")
        for name in ("max_update_ratio", "max_update_norm"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0
                                  or not math.isfinite(v)):
                raise ValueError(f"{name} = {short(v)} is invalid: expected a finite number > 0 or None")
        v = self.max_weight_share
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1):
            raise ValueError(f"max_weight_share = {short(v)} is invalid: expected a number in (0, 1] or None")

    def update_bound(self, w_t: torch.Tensor) -> float:
        """The largest ‖update‖ admitted around the global weights ``w_t``."""
        bounds = [math.inf]
        if self.max_update_ratio is not None:
            bounds.append(self.max_update_ratio * max(float(torch.linalg.vector_norm(w_t.double())), 1.0))
        if self.max_update_norm is not None:
            bounds.append(float(self.max_update_norm))
        return min(bounds)


def capped_weights(num_examples: np.ndarray, max_share: Optional[float]) -> np.ndarray:
    """The aggregation weights of one round's responders: their ``num_examples`` n_k, unless one of them would
    hold more than ``max_share`` of the total; then every such client is held at exactly that share and the
    others keep their n_k (and their ratios), which is the smallest change that meets the cap (water-filling:
    p_k = min(c, n_k / Z) with Z such that Σ p_k = 1). When K · c ≤ 1 no split can meet it and the weights
    are uniform.

    :param num_examples: n_k (K,), each ≥ 1.
    :param max_share: c ∈ (0, 1], or ``None`` for no cap.
    :return: weights (K,) float64 proportional to the capped shares (n_k itself when no share exceeds c).
    """
    n = np.asarray(num_examples, dtype=np.float64)
    if max_share is None or n.size == 0 or n.max() <= max_share * n.sum():
        return n
    k, c = n.size, float(max_share)
    if k * c <= 1.0:
        return np.full(k, n.min())
    capped = np.zeros(k, dtype=bool)
    while True:  # at most K passes: each one caps at least one more client, or stops
        free = n[~capped].sum()
        share = n / free * (1.0 - c * capped.sum())  # the free clients' shares, the capped ones' mass set aside
        over = ~capped & (share > c)
        if not over.any():
            break
        capped |= over
    out = n.copy()
    out[capped] = c / (1.0 - c * capped.sum()) * n[~capped].sum()  # share c exactly; the others keep n_k
    return out


def _number(m: Mapping[str, Any], key: str) -> Optional[float]:
    v = m.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def check_train_reply(msg: Any, layout: ParamLayout, w_t: torch.Tensor, limits: ReplyLimits,
                      registered: Optional[Mapping[int, int]] = None, client_of: Optional[Mapping[int, int]] = None,
                      sent_to: Optional[set] = None, full_gradient: bool = False) -> Optional[str]:
    """What is wrong with a train reply (a sentence naming the field), or None when it may be used.

    :param msg: the reply (a ``flwr.app.Message`` without an error).
    :param layout: the model's parameter layout.
    :param w_t: the global weights the client was sent (P,).
    :param registered: client index -> n_k it reported in the profiling round (None: this is that round).
    :param client_of: node id -> client index registered in the profiling round (None: this is that round).
    :param sent_to: the node ids the server sent this round's task to (None: every node).
    :param full_gradient: the reply carries a gradient, not weights.
    """
    content, node = msg.content, msg.metadata.src_node_id
    if sent_to is not None and node not in sent_to:
        return f"node {node} replied without being sent this round's task"
    if len(content.metric_records) != 1 or len(content.array_records) != 1:
        return (f"expected one metric record and one array record, got {len(content.metric_records)} and "
                f"{len(content.array_records)}")
    m = next(iter(content.metric_records.values()))
    values = {k: _number(m, k) for k in TRAIN_METRICS}
    bad = [k for k, v in values.items() if v is None or v < 0]
    if bad:
        return f"metric(s) {bad} missing, not numbers, not finite or negative: {short({k: m.get(k) for k in bad})}"
    c, n_k = values[PARTITION_KEY], values[NUM_EXAMPLES_KEY]
    if c != int(c) or (client_of is not None and client_of.get(node) != int(c)):
        return (f"{PARTITION_KEY} {short(m.get(PARTITION_KEY))} is not the one node {node} registered in the "
                f"profiling round ({client_of.get(node) if client_of is not None else '-'})")
    cap = limits.max_num_examples if registered is None else registered.get(int(c), 0)
    if n_k != int(n_k) or not 1 <= n_k <= cap:
        what = "max_num_examples" if registered is None else "the size it registered in the profiling round"
        return f"{NUM_EXAMPLES_KEY} {short(m.get(NUM_EXAMPLES_KEY))} is not an integer in [1, {cap}] ({what})"
    arrays = next(iter(content.array_records.values()))
    if sorted(arrays.keys()) != sorted(layout.names):
        return f"arrays {short(sorted(arrays.keys()))} are not the model's {short(layout.names)}"
    for name, shape in zip(layout.names, layout.shapes):
        a = arrays[name]
        try:
            floating = np.issubdtype(np.dtype(a.dtype), np.floating)
        except (TypeError, ValueError):
            floating = False
        if tuple(a.shape) != tuple(shape) or not floating:
            return f"array {name!r} is {a.dtype} of shape {tuple(a.shape)}, the model's is float of {tuple(shape)}"
    try:
        flat = flat_of(layout, arrays.to_torch_state_dict()).to(w_t.dtype)
    except (ValueError, TypeError, RuntimeError) as e:
        return f"arrays cannot be read as the model's weights ({short(str(e))})"
    if not bool(torch.isfinite(flat).all()):
        return "its weights are not all finite"
    update = flat if full_gradient else flat - w_t
    norm, bound = float(torch.linalg.vector_norm(update.double())), limits.update_bound(w_t)
    if not norm <= bound:
        return (f"its update's norm {norm:.3g} exceeds the bound {bound:.3g} (max_update_ratio "
                f"{limits.max_update_ratio}, max_update_norm {limits.max_update_norm})")
    return None


def check_evaluate_reply(msg: Any, limits: ReplyLimits, sent_to: Optional[set] = None) -> Optional[str]:
    """What is wrong with an evaluate reply (``num-examples`` in [1, max_num_examples], ``accuracy`` in
    [0, 1], ``loss`` >= 0, all finite), or None."""
    content, node = msg.content, msg.metadata.src_node_id
    if sent_to is not None and node not in sent_to:
        return f"node {node} replied without being sent this round's task"
    if len(content.metric_records) != 1:
        return f"expected one metric record, got {len(content.metric_records)}"
    m = next(iter(content.metric_records.values()))
    n, acc, loss = (_number(m, k) for k in (NUM_EXAMPLES_KEY, "accuracy", "loss"))
    if n is None or n != int(n) or not 1 <= n <= limits.max_num_examples:
        return f"{NUM_EXAMPLES_KEY} {short(m.get(NUM_EXAMPLES_KEY))} is not an integer in [1, {limits.max_num_examples}]"
    if acc is None or not 0 <= acc <= 1 or loss is None or loss < 0:
        return f"accuracy {short(m.get('accuracy'))} / loss {short(m.get('loss'))} out of range"
    return None
