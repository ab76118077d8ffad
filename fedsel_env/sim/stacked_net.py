"""K stacked models of one ``nn.Sequential`` as one batched forward, and its local SGD step (issue #33).

``torch.func.vmap(grad(...))`` (:class:`~fedsel_env.sim.training.BatchedTrainer`'s general path) turns a vmapped
``conv2d`` over K weight sets into one grouped convolution on a (B, K·C, H, W) layout, moving the client axis in
and out of the channels around every layer. For FAVOR's Fashion-MNIST round (10 clients × a batch of 10, 300
steps) that is latency-bound on a GPU: 1.2 ms a step even when replayed from a CUDA graph. Here the same network
is written out over a (K, B, ...) layout with the client axis leading throughout:

- ``Conv2d`` (groups 1, zero padding): ``unfold`` (im2col) of the K·B images, then one broadcast ``matmul`` of
  each client's (O, C·kh·kw) weight with its own images' columns, which lands in (K·B, O, H', W') directly;
- ``Linear``: ``baddbmm(bias, h, Wᵀ)`` on (K, B, I);
- ``ReLU``, ``MaxPool2d`` (and :class:`~fedsel_env.sim.models.Pool2x2`), ``Flatten``: PyTorch's own, on the
  merged (K·B, ...) axis;

and the masked-mean cross-entropy (FedProx's proximal term with it) is differentiated by autograd with respect
to the (K, P) flat parameters at once, so the gradient arrives flat and the SGD update is a handful of kernels
on the flat buffer instead of a few per parameter tensor.

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
            cols = F.unfold(h, ksize, dilation=dilation, padding=padding, stride=stride)  # (K·B, C·kh·kw, L)
            cols = cols.view(k, b, cols.shape[1], cols.shape[2])
            out = torch.matmul(w.reshape(k, 1, o, -1), cols)  # (K, B, O, L): client k's weight on its images
            if bias:
                out = out + params[names[1]].view(k, 1, o, 1)
            h = out.view(k * b, o, oh, ow)
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
        else:  # flatten
            h = h.reshape(k * b, -1)
    return h.view(k, b, -1)


def flat_gradient(net: StackedNet, unflatten: Callable[[torch.Tensor], Dict[str, torch.Tensor]],
                  flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
                  anchor_flat: Optional[torch.Tensor] = None, prox_mu: float = 0.0) -> torch.Tensor:
    """(K, P): each client's gradient of its masked-mean cross-entropy (+ μ/2 ‖w − anchor‖²) at its weights.

    :param flat: (K, P) the clients' weights; :param unflatten: (K, P) → the dict of stacked views
        (``ParamLayout.unflatten``); :param x: (K, B, *input); :param y: (K, B); :param mask: (K, B) 0/1.
    The per-client losses are summed: client k's weights enter only its own term, so the gradient of the sum
    is each client's own gradient.
    """
    with torch.enable_grad():
        leaf = flat.detach().requires_grad_(True)
        logits = forward(net, unflatten(leaf), x)
        k, b, c = logits.shape
        per_sample = F.cross_entropy(logits.reshape(k * b, c), y.reshape(k * b), reduction="none").view(k, b)
        loss = ((per_sample * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)).sum()
        if prox_mu > 0:
            loss = loss + 0.5 * prox_mu * ((leaf - anchor_flat) ** 2).sum()
        (g,) = torch.autograd.grad(loss, leaf)
    return g
