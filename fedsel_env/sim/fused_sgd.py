"""Fused local SGD of ReLU MLPs (``mlp``, ``logreg``): explicit batched matmuls instead of ``vmap(grad)``.

For the small models the cost of :class:`~fedsel_env.sim.training.BatchedTrainer`'s vmapped step is
functorch's dispatch, not arithmetic: the default preset's 4,810-parameter MLP spends ~3.5 ms a
minibatch step on 5 clients × 10 samples (issue #27). This module writes the forward and the backward
of a stack ``Flatten → Linear (→ ReLU → Linear)*`` out as the **same ATen operations, in the same
order**, that ``make_fx`` shows the vmapped autograd graph running, over a (clients, batch, features)
layout:

- forward, layer l: ``h_l = b_l.view(K, 1, O) + bmm(h_{l−1}, W_lᵀ)``, ReLU between layers;
  ``logp = _log_softmax(logits, 2)``;
- the masked-mean cross-entropy's backward: ``w = (1 / max(Σ mask, 1)) · mask``,
  ``g_logp = scatter(0, y, −1) · w``, ``g = _log_softmax_backward_data(g_logp, logp)``;
- per layer, from the top: ``∇W_l = bmm(gᵀ, h_{l−1})``, ``∇b_l = Σ_batch g``, then
  ``g ← threshold_backward(bmm(g, W_l), h_{l−1}, 0)``; FedProx adds ``f32(μ/2) · (2 (p − anchor))``;
- momentum ``buf = buf · m + g`` and ``p −= η · g``, as the trainer writes them.

So the result equals the vmapped path's bit for bit on the CPU (``tests/test_fused_sgd.py``), and a
client's result does not depend on which other clients share the call (a ``bmm`` batch element is
computed on its own), which is what lets ``fedsel_env.vector`` train the clients of many federations
in one call.

The API (device-agnostic: the same code on CPU and CUDA):

- :func:`fused_net` — the model's layers as a :class:`FusedNet` when it qualifies, else ``None``;
- :func:`forward` — one model's logits on (n, D) rows with the module's own ops (``F.linear``, ``relu``):
  the same values as ``functional_call`` without its per-call overhead;
- :func:`train_fused` — local SGD of K stacked models over a minibatch plan (S, K, B), in place. Each
  client has its own start (its rows of ``params``) and FedProx anchor. Within a call there is no host
  sync: which clients are still training in each step is read from the plan's mask **on the host**
  (``active``, numpy) before the loop; finished clients leave the batch (views of a prefix of the
  clients sorted by their step count), or, with ``drop_finished=False``, every step keeps all K clients
  and masks the finished ones' update (fixed shapes, as a captured CUDA graph wants).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .linear_sgd import label_gradient

#: bytes of gathered minibatch inputs and label gradients held at once for a block of steps
BLOCK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class FusedNet:
    """A ``Flatten → Linear (→ ReLU → Linear)*`` network: each layer's (weight, bias) parameter names."""

    layers: Tuple[Tuple[str, Optional[str]], ...]
    in_features: int

    def names(self) -> List[str]:
        """The parameter names, layer by layer (weight, then bias)."""
        return [n for w, b in self.layers for n in ((w, b) if b is not None else (w,))]


def fused_net(model: nn.Module, x_train: torch.Tensor) -> Optional[FusedNet]:
    """The model's layers when it is ``nn.Sequential(Flatten?, Linear, (ReLU, Linear)*)`` on float32, else None.

    Matched by exact type (a subclass may change ``forward``): an optional default ``nn.Flatten`` first,
    then linear layers with a default ``nn.ReLU`` between each two. ``logreg`` and ``mlp`` qualify.
    """
    if type(model) is not nn.Sequential or x_train.dtype != torch.float32 or x_train.dim() < 2:
        return None
    mods = list(model.named_children())
    if mods and type(mods[0][1]) is nn.Flatten:
        if (mods[0][1].start_dim, mods[0][1].end_dim) != (1, -1):
            return None
        mods = mods[1:]
    elif x_train.dim() != 2:
        return None
    if not mods or len(mods) % 2 == 0:
        return None
    layers = []
    for i, (name, mod) in enumerate(mods):
        if i % 2 == 1:
            if type(mod) is not nn.ReLU or mod.inplace:
                return None
            continue
        if type(mod) is not nn.Linear or mod.weight.dtype != torch.float32:
            return None
        layers.append((f"{name}.weight", f"{name}.bias" if mod.bias is not None else None))
    first = dict(model.named_children())[layers[0][0].split(".")[0]]
    if first.in_features != int(np.prod(x_train.shape[1:])):
        return None
    return FusedNet(tuple(layers), first.in_features)


def forward(net: FusedNet, params: Dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Logits of one model (unbatched ``params``) on rows ``x`` (n, ...): ``nn.Sequential``'s own operations."""
    h = x.reshape(x.shape[0], net.in_features) if x.dim() != 2 else x
    for i, (w, b) in enumerate(net.layers):
        if i:
            h = F.relu(h)
        h = F.linear(h, params[w], params[b] if b is not None else None)
    return h


def _sgd_step(ps: List[torch.Tensor], bufs: List[torch.Tensor], anchors: Optional[List[torch.Tensor]],
              net_biases: List[bool], x: torch.Tensor, g_logp: torch.Tensor, lr: float, momentum: float,
              half_mu: Optional[torch.Tensor], keep: Optional[torch.Tensor]) -> None:
    """One minibatch step of n stacked models (``ps``: per layer weight (n, O, I) then bias (n, O)), in place."""
    n = x.shape[0]
    acts, pre, i = [x], [], 0
    for has_bias in net_biases:  # forward, keeping each layer's input
        w = ps[i]
        h = torch.bmm(acts[-1], w.transpose(1, 2))
        if has_bias:
            h = ps[i + 1].view(n, 1, ps[i + 1].shape[1]) + h
        i += 2 if has_bias else 1
        pre.append(h)
        if len(pre) < len(net_biases):
            acts.append(torch.relu(h))
    logp = torch._log_softmax(pre[-1], 2, False)
    g = torch._log_softmax_backward_data(g_logp, logp, 2, x.dtype)
    grads: List[torch.Tensor] = [None] * len(ps)  # type: ignore[list-item]
    offsets = np.cumsum([0] + [2 if hb else 1 for hb in net_biases])
    for layer in range(len(net_biases) - 1, -1, -1):
        j = int(offsets[layer])
        if layer > 0:
            g_below = torch.bmm(g, ps[j])
        grads[j] = torch.bmm(g.transpose(1, 2), acts[layer])
        if net_biases[layer]:
            grads[j + 1] = g.sum(dim=1)
        if layer > 0:
            g = torch.ops.aten.threshold_backward(g_below, acts[layer], 0)
    if half_mu is not None:
        grads = [half_mu * ((q - a) * 2.0) + gr for q, a, gr in zip(ps, anchors, grads)]
    if bufs:
        if keep is None:
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_add_(bufs, grads)  # buf·m + g, in place
        else:
            for buf, gr in zip(bufs, grads):
                buf.copy_(torch.where(keep.view(-1, *([1] * (gr.dim() - 1))), buf * momentum + gr, buf))
        grads = list(bufs)
    if keep is not None:
        grads = [gr * keep.view(-1, *([1] * (gr.dim() - 1))).to(gr.dtype) for gr in grads]
    if bufs and keep is None:  # the gradients are the momentum buffers: scaled into new tensors
        torch._foreach_sub_(ps, torch._foreach_mul(grads, lr))  # p −= η · g
    else:  # fresh gradients: scaled in place (the same products, without allocating (n, P) floats a step)
        torch._foreach_mul_(grads, lr)
        torch._foreach_sub_(ps, grads)  # p −= η · g


def train_fused(params: Dict[str, torch.Tensor], net: FusedNet, x_train: torch.Tensor, y_train: torch.Tensor,
                idx: torch.Tensor, mask: torch.Tensor, anchor: Dict[str, torch.Tensor], lr: float, momentum: float,
                prox_mu: float, active: Optional[np.ndarray] = None, drop_finished: bool = True) -> None:
    """Local SGD of K stacked models over a minibatch plan, in place.

    :param params: the stacked parameters (each (K, ...)), e.g. views of a (K, P) tensor: each client's
        start, updated in place to its local model.
    :param net: the layers (:func:`fused_net`).
    :param x_train: the rows the plan indexes (flattened to D features); ``y_train`` their labels.
    :param idx: the plan's row indices (S, K, B) on ``x_train``'s device; ``mask`` its 0/1 mask (S, K, B).
    :param anchor: FedProx's anchor per parameter: unbatched (one for all) or (K, ...) (one per client).
    :param lr: η; ``momentum``: PyTorch's convention, no dampening; ``prox_mu``: μ (0: no proximal term).
    :param active: (S, K) bool on the host, which clients train in each step (the plan's ``mask.sum(2) > 0``);
        computed from ``mask`` (one copy to the host) when not given.
    :param drop_finished: run each step on the clients still training only; False keeps all K and masks
        the finished ones' update (the same values, fixed shapes).
    """
    s_max, k, b = idx.shape
    if s_max == 0 or k == 0:
        return
    if active is None:
        active = (mask.sum(dim=2) > 0).cpu().numpy()
    steps = active.sum(axis=0)
    if not np.array_equal(active, np.arange(s_max)[:, None] < steps[None, :]):
        raise AssertionError("the minibatch plan's active steps are not a prefix of each client's steps")
    s_max = int(steps.max())  # steps after every client's last do nothing
    if s_max == 0:
        return
    order = np.argsort(-steps, kind="stable")  # clients by their number of steps, longest first
    width = ((steps[order][None, :] > np.arange(s_max)[:, None]).sum(axis=1) if drop_finished
             else np.full(s_max, k)).tolist()
    names = net.names()
    biases = [bn is not None for _, bn in net.layers]
    dev, dtype = x_train.device, x_train.dtype
    x_rows = x_train.reshape(x_train.shape[0], net.in_features)
    identity = bool(np.array_equal(order, np.arange(k)))
    perm = None if identity else torch.from_numpy(order).to(dev)
    ps = [params[n] if identity else params[n][perm] for n in names]
    bufs = [torch.zeros_like(q) for q in ps] if momentum > 0 else []
    anchors, half_mu = None, None
    if prox_mu > 0:
        anchors = [anchor[n] for n in names]
        anchors = [a if a.dim() < q.dim() or identity else a[perm] for a, q in zip(anchors, ps)]
        half_mu = torch.tensor(0.5 * prox_mu, dtype=dtype, device=dev)  # autograd's f32(0.5 · μ)
    if perm is not None:
        idx, mask = idx[:, perm], mask[:, perm]
    c = ps[len(ps) - (2 if biases[-1] else 1)].shape[1]  # classes: the last layer's outputs
    per_step = k * b * (net.in_features + c) * x_rows.element_size()
    block = max(1, BLOCK_BYTES // max(per_step, 1))
    n_cur, views = -1, None
    with torch.no_grad():
        for s0 in range(0, s_max, block):
            s1 = min(s_max, s0 + block)
            n0 = width[s0]
            ii, mm = idx[s0:s1, :n0], mask[s0:s1, :n0]
            xb = x_rows[ii]  # (L, n0, B, D): the block's minibatches
            g_logp = label_gradient(mm, y_train[ii], c, dtype)
            act = active[s0:s1][:, order[:n0]] if not drop_finished else None
            for s in range(s0, s1):
                n = width[s]
                if n != n_cur:  # views of the clients still training
                    n_cur = n
                    views = ([q[:n] for q in ps], [q[:n] for q in bufs],
                             None if anchors is None else [a[:n] if a.dim() == q.dim() else a
                                                           for a, q in zip(anchors, ps)])
                keep = None
                if act is not None and not act[s - s0].all():
                    keep = torch.from_numpy(act[s - s0]).to(dev)
                _sgd_step(views[0], views[1], views[2], biases, xb[s - s0, :n], g_logp[s - s0, :n], lr, momentum,
                          half_mu, keep)
        if perm is not None:
            for n, q in zip(names, ps):
                params[n][perm] = q


__all__ = ["BLOCK_BYTES", "FusedNet", "forward", "fused_net", "train_fused"]
