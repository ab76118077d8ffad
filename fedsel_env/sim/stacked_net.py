"""K stacked models of one ``nn.Sequential`` as one batched forward, and its local SGD step (issue #33).

``torch.func.vmap(grad(...))`` (:class:`~fedsel_env.sim.training.BatchedTrainer`'s general path) turns a vmapped
``conv2d`` over K weight sets into one grouped convolution on a (B, K·C, H, W) layout, moving the client axis in
and out of the channels around every layer. For FAVOR's Fashion-MNIST round (10 clients × a batch of 10, 300
steps) that is latency-bound on a GPU: 1.2 ms a step even when replayed from a CUDA graph. Here the same network
is written out over a (K, B, ...) layout with the client axis leading throughout:

- ``Conv2d`` (groups 1, zero padding): im2col of the K·B images as strided views and one copy, then one
  ``baddbmm`` of each client's columns (B·H'·W', C·kh·kw) with its (C·kh·kw, O) weight, channels last;
- ``Linear``: ``baddbmm(bias, h, Wᵀ)`` on (K, B, I);
- ``ReLU``, ``MaxPool2d`` (and :class:`~fedsel_env.sim.models.Pool2x2`), ``Flatten``: PyTorch's own, on the
  merged (K·B, ...) axis;

and the masked-mean cross-entropy (FedProx's proximal term with it) is differentiated by autograd, the
gradients concatenated into one (K, P) tensor, so the SGD update is a handful of kernels on the flat buffer
instead of a few per parameter tensor.

The values equal the vmapped path's to float rounding (a different summation order: ``tests/test_stacked_net.py``
checks the gradient and a round against ``vmap(grad)``). It is the captured round's CNN step on CUDA
(:mod:`fedsel_env.sim.captured`); the CPU keeps the vmapped path, whose results the committed records hold.

- :func:`stacked_net` — the plan of a model when every layer is one of the above, else ``None``;
- :func:`forward` — logits (K, B, classes) of K stacked models on (K, B, *input) inputs;
- :func:`flat_gradient` — ∇ of each client's masked-mean loss (+ FedProx) with respect to its flat weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

#: one layer of the plan: (kind, parameter names, options)
Layer = Tuple[str, Tuple[str, ...], Tuple]


@dataclass(frozen=True)
class StackedNet:
    """A ``nn.Sequential`` of Conv2d / Linear / ReLU / MaxPool2d / Flatten, layer by layer."""

    layers: Tuple[Layer, ...]


def _pair(v) -> Tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def stacked_net(model: nn.Module) -> Optional[StackedNet]:
    """The plan of ``model`` when it is a ``nn.Sequential`` this module can run, else ``None``.

    Runs: ``Conv2d`` (groups 1, ``padding_mode`` 'zeros', a numeric padding), ``Linear``, ``ReLU``,
    ``MaxPool2d`` (without ``return_indices``), ``Flatten`` (from dimension 1 to the end). Anything else — a
    plug-in model, BatchNorm, a nested module — returns ``None`` and keeps the ``vmap`` path.
    """
    if not isinstance(model, nn.Sequential):
        return None
    layers = []
    for name, m in model.named_children():
        params = tuple(f"{name}.{p}" for p, _ in m.named_parameters())
        if type(m) is nn.Conv2d:
            if m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str):
                return None
            layers.append(("conv", params, (m.bias is not None, _pair(m.kernel_size), _pair(m.stride),
                                            _pair(m.padding), _pair(m.dilation))))
        elif type(m) is nn.Linear:
            layers.append(("linear", params, (m.bias is not None,)))
        elif type(m) is nn.ReLU:
            layers.append(("relu", (), ()))
        elif isinstance(m, nn.MaxPool2d) and not m.return_indices:
            layers.append(("pool", (), (m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)))
        elif type(m) is nn.Flatten and m.start_dim == 1 and m.end_dim == -1:
            layers.append(("flatten", (), ()))
        else:
            return None
    if not layers or layers[-1][0] != "linear":
        return None
    return StackedNet(tuple(layers))


def _columns(h: torch.Tensor, ksize, stride, padding, dilation) -> torch.Tensor:
    """im2col of (N, C, H, W) as (N, OH·OW, C·kh·kw): ``Tensor.unfold`` views and one copy.

    ``F.unfold`` launches one CUDA kernel per image (200 a FAVOR step, 1.2 of its 1.9 ms: the H200 profile in
    docs/PERFORMANCE.md); strided views cost nothing and their backward is one ``unfold_backward`` per view.
    """
    if dilation != (1, 1):
        cols = F.unfold(h, ksize, dilation=dilation, padding=padding, stride=stride)  # (N, C·kh·kw, L)
        return cols.transpose(1, 2)
    if padding != (0, 0):
        h = F.pad(h, (padding[1], padding[1], padding[0], padding[0]))
    v = h.unfold(2, ksize[0], stride[0]).unfold(3, ksize[1], stride[1])  # (N, C, OH, OW, kh, kw)
    n, c, oh, ow, kh, kw = v.shape
    return v.permute(0, 2, 3, 1, 4, 5).reshape(n, oh * ow, c * kh * kw)


def forward(net: StackedNet, params: Dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Logits (K, B, classes) of K stacked models (``params[name]``: (K, *shape)) on inputs (K, B, *input)."""
    k, b = x.shape[0], x.shape[1]
    h = x.reshape(k * b, *x.shape[2:])  # the client and batch axes merged while layers are per sample
    for kind, names, opt in net.layers:
        if kind == "conv":
            bias, ksize, stride, padding, dilation = opt
            w = params[names[0]]  # (K, O, C, kh, kw)
            o = w.shape[1]
            hh, ww = h.shape[-2:]
            oh = (hh + 2 * padding[0] - dilation[0] * (ksize[0] - 1) - 1) // stride[0] + 1
            ow = (ww + 2 * padding[1] - dilation[1] * (ksize[1] - 1) - 1) // stride[1] + 1
            cols = _columns(h, ksize, stride, padding, dilation)  # (K·B, L, C·kh·kw)
            cols = cols.reshape(k, b * oh * ow, cols.shape[-1])
            wt = w.reshape(k, o, -1).transpose(1, 2)  # (K, C·kh·kw, O)
            out = torch.baddbmm(params[names[1]].unsqueeze(1), cols, wt) if bias else torch.bmm(cols, wt)
            # (K, B·L, O): channels last; the (K·B, O, OH, OW) view below keeps that memory layout, which ReLU,
            # max-pooling and the next unfold take as it is
            h = out.view(k * b, oh, ow, o).permute(0, 3, 1, 2)
        elif kind == "linear":
            bias = opt[0]
            if h.dim() != 2:
                h = h.reshape(k * b, -1)
            w = params[names[0]]  # (K, O, I)
            hk = h.view(k, b, h.shape[-1])
            out = (torch.baddbmm(params[names[1]].unsqueeze(1), hk, w.transpose(1, 2)) if bias
                   else torch.bmm(hk, w.transpose(1, 2)))
            h = out.view(k * b, -1)
        elif kind == "relu":
            h = torch.relu(h)
        elif kind == "pool":
            ks, st, pad, dil, ceil = opt
            h = F.max_pool2d(h, ks, st, pad, dil, ceil)
        else:  # flatten, in (C, H, W) order whatever the memory layout
            h = h.reshape(k * b, -1)
    return h.view(k, b, -1)


def flat_gradient(net: StackedNet, unflatten: Callable[[torch.Tensor], Dict[str, torch.Tensor]],
                  flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
                  anchor_flat: Optional[torch.Tensor] = None, prox_mu: float = 0.0) -> torch.Tensor:
    """(K, P): each client's gradient of its masked-mean cross-entropy (+ μ/2 ‖w − anchor‖²) at its weights.

    :param flat: (K, P) the clients' weights; :param unflatten: (K, P) → the dict of stacked views
        (``ParamLayout.unflatten``, in the flat order); :param x: (K, B, *input); :param y: (K, B);
        :param mask: (K, B) 0/1. The per-client losses are summed: client k's weights enter only its own term,
        so the gradient of the sum is each client's own gradient. Each parameter is its own leaf and the
        gradients are concatenated once (a leaf of the whole (K, P) would fill and add a (K, P) buffer per
        parameter in the backward).
    """
    views = unflatten(flat)
    anchors = unflatten(anchor_flat) if prox_mu > 0 else None
    with torch.enable_grad():
        leaves = {n: v.detach().requires_grad_(True) for n, v in views.items()}
        logits = forward(net, leaves, x)
        k, b, c = logits.shape
        per_sample = F.cross_entropy(logits.reshape(k * b, c), y.reshape(k * b), reduction="none").view(k, b)
        loss = ((per_sample * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)).sum()
        if prox_mu > 0:
            loss = loss + 0.5 * prox_mu * sum(((leaves[n] - anchors[n]) ** 2).sum() for n in leaves)
        grads = torch.autograd.grad(loss, list(leaves.values()))
    return torch.cat([g.reshape(flat.shape[0], -1) for g in grads], dim=1)
